package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// A read whose reply never arrives (the server answered after the read's
// deadline, or the connection died) may still have run at the server:
// its entries are then pending to this consumer, yet no handler has them,
// and the next XREADGROUP > returns the entries after them. Left alone,
// they would come back through XAUTOCLAIM one lease later, behind newer
// messages of their keys. So after such a read the subscription takes
// them back before it reads anything new (recoverOwn):
//
//  1. It fences the lost reads: CLIENT KILL ID of each connection it gave
//     up on, on that connection's node. Once the kill has run, no read
//     sent on it can still run at the server (one that has not run yet
//     dies with its connection), so what the lost reads took is in the
//     pending list from then on.
//  2. It reads its own pending entries after the highest entry ID it has
//     handed out (handed): every entry it handed out is at or below it,
//     and every entry a lost XREADGROUP > took is above it, since such a
//     read returns only entries after every entry the group delivered
//     before. It reads them with XPENDING and XRANGE rather than
//     XREADGROUP ... <id>, which would count one more delivery of each:
//     the delivery count stays the one the lost read set, so Attempt is
//     1 for an entry no handler has seen. The same script restarts each
//     entry's lease (XCLAIM ... JUSTID, which counts no delivery).
//
// Without the CLIENT KILL permission, and through a Sentinel failover
// client (after a failover the ID would name a client of the new
// master), the fence is skipped: the server
// runs commands in the order they reach it, and the lost read reached it
// before the recovery was sent, so only a link that delays the lost read
// past the recovery can still hide entries, which then come back after
// their lease.

// ownPendingScript returns this consumer's pending entries after ARGV[3]
// (exclusive), at most ARGV[4] of them: for each its ID, its delivery
// count and its fields (false when the entry was deleted from the
// stream), and restarts the lease of each that still exists. KEYS[1] the
// stream; ARGV[1] the group, ARGV[2] the consumer.
var ownPendingScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '(' .. ARGV[3], '+', tonumber(ARGV[4]), ARGV[2])
local out = {}
for i, e in ipairs(p) do
  local r = redis.call('XRANGE', KEYS[1], e[1], e[1])
  local fields = false
  if #r > 0 then
    fields = r[1][2]
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, e[1], 'JUSTID')
  end
  out[i] = {e[1], e[4], fields}
end
return out
`)

// maxLostReads bounds the lost reads a reader remembers to fence.
const maxLostReads = 16

// maxGiveBack bounds the entries Close gives back after lost reads
// (giveBackLost).
const maxGiveBack = 1024

// giveBackOwnScript makes this consumer's pending entries after ARGV[3]
// (exclusive), at most ARGV[4] of them, claimable at once: idle for
// ARGV[5] ms, the lease and one, with their delivery counter one lower
// (XCLAIM ... IDLE RETRYCOUNT JUSTID), so that the reclaim that hands one
// out again counts the delivery the lost read counted. It returns how many
// it gave back. KEYS[1] the stream; ARGV[1] the group, ARGV[2] the
// consumer.
var giveBackOwnScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '(' .. ARGV[3], '+', tonumber(ARGV[4]), ARGV[2])
for _, e in ipairs(p) do
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, e[1], 'IDLE', tonumber(ARGV[5]), 'RETRYCOUNT', math.max(e[4] - 1, 0), 'JUSTID')
end
return #p
`)

// lostRead is a read connection given up on while its read may still run
// at the server.
type lostRead struct {
	node  redis.Cmdable
	id    int64
	fixed bool // see reader.fixed
}

// noteHanded records that the entry id was handed out.
func (s *subscription) noteHanded(id string) {
	if id != "" && (s.handed == "" || lessID(s.handed, id)) {
		s.handed = id
	}
}

// recoverOwn takes back, up to limit, the entries lost reads left pending
// to this consumer (see above), after fencing those reads.
func (s *subscription) recoverOwn(ctx context.Context, limit int) ([]*backend.Message, error) {
	if err := s.fenceLostReads(ctx); err != nil {
		return nil, err
	}
	var rows []any
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		rows, err = ownPendingScript.Run(ctx, s.b.client, []string{s.keys.stream},
			s.cfg.Group, s.consumer, s.handedFrom(), limit).Slice()
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isNoGroup(err) {
			s.setRecovering(false) // the group is new: nothing of it is pending
			return nil, s.recoverGroup(ctx, err)
		}
		return nil, receiveErr(s.errf("recover pending", err))
	}
	if len(rows) < limit {
		s.setRecovering(false)
	}
	msgs := make([]*backend.Message, 0, len(rows))
	var gone []string
	for _, v := range rows {
		row, ok := v.([]any)
		if !ok || len(row) < 3 {
			continue
		}
		id, _ := row[0].(string)
		count, _ := row[1].(int64)
		s.noteHanded(id)
		if row[2] == nil {
			gone = append(gone, id)
			continue
		}
		values := toValues(row[2])
		attempt := int(max(count, 1))
		m := &backend.Message{}
		if err := decode(id, values, m); err != nil {
			s.quarantine(ctx, id, values, attempt, err)
			continue
		}
		m.AckID = &entryRef{id: id, count: int(count)}
		m.Attempt = attempt
		msgs = append(msgs, m)
	}
	s.dropTrimmed(ctx, gone)
	if s.recovering {
		s.setRecovering(true) // the rest starts after what this took back
	}
	s.b.stats.recovered.Add(int64(len(msgs)))
	return msgs, nil
}

// setRecovering sets recovering, and lostFrom with it.
func (s *subscription) setRecovering(v bool) {
	s.recovering = v
	if !v {
		s.lostFrom.Store(nil)
		return
	}
	from := s.handedFrom()
	s.lostFrom.Store(&from)
}

// giveBackLost is the part of Close that gives back what lost reads took
// when no Receive took it back (lostFrom is set): it fences those reads,
// as recoverOwn does, and makes this consumer's pending entries after
// lostFrom, which no handler has had, claimable at once with their
// delivery uncounted (as Release does). The group's next reader, such as
// the next holder of a key-ordered group's lock, which holds back their
// keys until they come back, claims them at its next reclaim scan instead
// of after their lease. Bounded by giveBackTimeout and maxGiveBack
// entries; past either, the rest come back after their lease, and the
// error says so.
func (s *subscription) giveBackLost() error {
	from := s.lostFrom.Load()
	if from == nil || s.b.isClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	err := s.fenceLostReads(ctx)
	var n int64
	if err == nil {
		err = s.b.call(ctx, func(ctx context.Context) error {
			var err error
			n, err = giveBackOwnScript.Run(ctx, s.b.client, []string{s.keys.stream},
				s.cfg.Group, s.consumer, *from, maxGiveBack, s.lease().Milliseconds()+1).Int64()
			return err
		})
	}
	switch {
	case err == nil:
		if n > 0 {
			s.rc.dueAt(time.Now())
		}
		if n >= maxGiveBack {
			return fmt.Errorf("give back what a read given up on took: more than %d entries (the rest come back after their lease)", maxGiveBack)
		}
	case isNoGroup(err):
	default:
		return fmt.Errorf("give back what a read given up on took: %w (it comes back after its lease)", err)
	}
	return nil
}

// handedFrom is where recoverOwn starts: after the highest entry handed
// out, or after 0-0 when none was.
func (s *subscription) handedFrom() string {
	if s.handed == "" {
		return "0-0"
	}
	return s.handed
}

// fenceLostReads kills the connections of the reads the reader gave up
// on (see above). Without the permission to, it goes on unfenced and
// says so once.
func (s *subscription) fenceLostReads(ctx context.Context) error {
	for _, l := range s.reader.lostReads() {
		if s.noFence.Load() || !l.fixed {
			s.reader.fenced(l)
			continue
		}
		err := s.b.call(ctx, func(ctx context.Context) error {
			return l.node.ClientKillByFilter(ctx, "ID", strconv.FormatInt(l.id, 10)).Err()
		})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case isPermanentRedisErr(err):
			s.noFence.Store(true)
			s.observe(observer.ScopeReceive, "", 0, s.errf("receive", fmt.Errorf(
				"recovering what a lost read took without fencing it (CLIENT KILL refused: %w); grant +client|kill", err)))
		default:
			return s.errf("recover pending", err)
		}
		s.reader.fenced(l)
	}
	return nil
}
