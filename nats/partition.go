package nats

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Partitioner = (*Backend)(nil)

// A partitioned topic keeps its partition count and its groups' live
// members in the key-value bucket of the group locks (locksKV), which the
// partitions' group locks need anyway, so a partitioned topic makes no
// bucket of its own and the backend makes its one bucket once:
//
//	parts.<hex topic>                the count, in decimal, created once
//	members.<hex topic>.<hex group>  "<member> <alive until, Unix ms>" lines
//
// The count is written with Create, which the server refuses when the key
// holds a value: of two callers recording different counts at once, the
// first wins and the other reads it. The member list is replaced with
// compare-and-set on its revision. Lock keys are hex.hex, so neither kind
// of key can name a lock. Members expire by the writer's clock, as the
// locks do.

func partsKey(topic string) string { return "parts." + hex.EncodeToString([]byte(topic)) }

func membersKey(topic, group string) string {
	return "members." + hex.EncodeToString([]byte(topic)) + "." + hex.EncodeToString([]byte(group))
}

// membersTries bounds the compare-and-set rounds of one member-list
// update; the members of a group beat once a second each, so a round
// rarely loses.
const membersTries = 10

// partitioned returns the bucket that holds partitioned topics, or why
// there is none.
func (b *Backend) partitioned(ctx context.Context, op string) (jetstream.KeyValue, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("nats: %s: %w", op, backend.ErrClosed)
	}
	if b.opts.CoreNATS {
		return nil, fmt.Errorf("nats: %s: %w: core NATS has no key-value store", op, backend.ErrUnsupported)
	}
	kv, err := b.locksKV(ctx)
	if err != nil {
		return nil, fmt.Errorf("nats: %s: %w", op, err)
	}
	return kv, nil
}

// Partitions implements backend.Partitioner.
func (b *Backend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	op := fmt.Sprintf("partitions of %q", topic)
	kv, err := b.partitioned(ctx, op)
	if err != nil {
		return 0, err
	}
	key := partsKey(topic)
	// exists: a Create found the count there, which a replica that is
	// behind the leader may not show yet (reads go to any replica).
	exists := false
	var r retry
	for {
		c, found, err := b.readCount(ctx, kv, key)
		switch {
		case err != nil:
			return 0, fmt.Errorf("nats: %s: %w", op, err)
		case found || n <= 0 && !exists:
			return c, nil
		case exists:
			if err := r.pause(ctx); err != nil {
				return 0, fmt.Errorf("nats: %s: the recorded count is not readable yet: %w", op, err)
			}
			continue
		}
		err = settled(ctx, func() error {
			_, err := kv.Create(ctx, key, []byte(strconv.Itoa(n)))
			return err
		})
		if err == nil {
			return n, nil
		}
		if !isConflict(err) {
			return 0, fmt.Errorf("nats: %s: %w", op, err)
		}
		exists = true
	}
}

// readCount reads the count at key; found is false when none is
// recorded.
func (b *Backend) readCount(ctx context.Context, kv jetstream.KeyValue, key string) (n int, found bool, err error) {
	e, err := b.leaderGet(ctx, kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err = strconv.Atoi(string(e.value))
	if err != nil || n < 1 {
		return 0, false, backend.Permanent(fmt.Errorf("the recorded partition count %q is not a count", e.value))
	}
	return n, true, nil
}

// Heartbeat implements backend.Partitioner.
func (b *Backend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	return b.updateMembers(ctx, "heartbeat", topic, group, func(ms memberList, now time.Time) memberList {
		ms[member] = now.Add(ttl)
		return ms
	})
}

// Members implements backend.Partitioner; it only reads.
func (b *Backend) Members(ctx context.Context, topic, group string) ([]string, error) {
	op := fmt.Sprintf("members of group %q on %q", group, topic)
	kv, err := b.partitioned(ctx, op)
	if err != nil {
		return nil, err
	}
	ms, _, err := b.readMembers(ctx, kv, membersKey(topic, group))
	if err != nil {
		return nil, fmt.Errorf("nats: %s: %w", op, err)
	}
	return ms.live(time.Now()), nil
}

// Leave implements backend.Partitioner.
func (b *Backend) Leave(ctx context.Context, topic, group, member string) error {
	_, err := b.updateMembers(ctx, "leave", topic, group, func(ms memberList, _ time.Time) memberList {
		if _, ok := ms[member]; !ok {
			return nil
		}
		delete(ms, member)
		return ms
	})
	return err
}

// updateMembers applies f to the group's member list, without the members
// whose time ran out, with compare-and-set, and returns the live members.
// f returns nil to leave the list as it is.
func (b *Backend) updateMembers(ctx context.Context, verb, topic, group string, f func(memberList, time.Time) memberList) ([]string, error) {
	op := fmt.Sprintf("%s of group %q on %q", verb, group, topic)
	kv, err := b.partitioned(ctx, op)
	if err != nil {
		return nil, err
	}
	key := membersKey(topic, group)
	var r retry
	for try := 0; ; try++ {
		if try > 0 {
			// Lost the compare-and-set, or read a replica that was
			// behind: read again shortly.
			if err := r.pause(ctx); err != nil {
				return nil, fmt.Errorf("nats: %s: %w", op, err)
			}
		}
		ms, rev, err := b.readMembers(ctx, kv, key)
		if err != nil {
			return nil, fmt.Errorf("nats: %s: %w", op, err)
		}
		now := time.Now()
		live := ms.without(now)
		next := f(live, now)
		if next == nil {
			return live.live(now), nil
		}
		err = settled(ctx, func() error {
			// rev is that of the list, or of its marker once purged, or
			// 0 when none was ever written: a compare-and-set against
			// what the leader has (see leaderGet).
			_, err := kv.Update(ctx, key, next.encode(), rev)
			return err
		})
		switch {
		case err == nil:
			return next.live(now), nil
		case !isConflict(err):
			return nil, fmt.Errorf("nats: %s: %w", op, err)
		case try == membersTries:
			return nil, fmt.Errorf("nats: %s: too many concurrent updates", op)
		}
	}
}

// memberList maps the members of a group to when they drop out.
type memberList map[string]time.Time

// readMembers reads the list at key and its revision (an empty list
// with the revision of its marker, or 0 when none was ever written).
func (b *Backend) readMembers(ctx context.Context, kv jetstream.KeyValue, key string) (memberList, uint64, error) {
	e, err := b.leaderGet(ctx, kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return memberList{}, e.rev, nil
	}
	if err != nil {
		return nil, 0, err
	}
	ms := memberList{}
	for line := range strings.Lines(string(e.value)) {
		m, until, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		unixMs, err := strconv.ParseInt(until, 10, 64)
		if ok && err == nil {
			ms[m] = time.UnixMilli(unixMs)
		}
	}
	return ms, e.rev, nil
}

// without returns the members still alive at now.
func (ms memberList) without(now time.Time) memberList {
	out := make(memberList, len(ms)+1)
	for m, until := range ms {
		if now.Before(until) {
			out[m] = until
		}
	}
	return out
}

// live returns the members alive at now, sorted.
func (ms memberList) live(now time.Time) []string {
	out := make([]string, 0, len(ms))
	for m, until := range ms {
		if now.Before(until) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

func (ms memberList) encode() []byte {
	var b []byte
	for _, m := range slices.Sorted(maps.Keys(ms)) {
		b = fmt.Appendf(b, "%s %d\n", m, ms[m].UnixMilli())
	}
	return b
}

// forgetPartitions deletes topic's partition count and its groups' member
// lists (DeleteTopic). It leaves the bucket uncreated when it does not
// exist yet, and writes nothing for a topic that has no count.
func (b *Backend) forgetPartitions(ctx context.Context, topic string) error {
	kv, err := b.js.KeyValue(ctx, b.bucketName("_LOCKS"))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, found, err := b.readCount(ctx, kv, partsKey(topic)); err != nil || !found {
		return err
	}
	lister, err := kv.ListKeysFiltered(ctx, "members."+hex.EncodeToString([]byte(topic))+".*")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return err
	}
	if err == nil {
		for key := range lister.Keys() {
			if err := kv.Purge(ctx, key); err != nil {
				return err
			}
		}
	}
	return kv.Purge(ctx, partsKey(topic))
}

// settleWait bounds how long a retry goes on when its ctx has no earlier
// deadline.
const settleWait = 10 * time.Second

// settled runs f, again while it fails with no responders: a replicated
// bucket answers so while its stream elects a leader, or while its
// replicas come up after it was created (direct gets are answered by
// replicas that caught up); and again while the server fails to create
// a stream with an error of its own (see unsettled). It returns by ctx's
// deadline, and gives up after settleWait.
func settled(ctx context.Context, f func() error) error {
	err := f()
	var r retry
	for unsettled(err) {
		if perr := r.pause(ctx); perr != nil {
			return fmt.Errorf("%w (until %w)", err, perr)
		}
		err = f()
	}
	return err
}

// retry paces the rounds of a retry: 10 ms, doubling up to 250 ms, for at
// most settleWait in all.
type retry struct {
	wait  time.Duration
	until time.Time
}

// pause waits before the next round; it fails when ctx ends first or the
// rounds have taken settleWait.
func (r *retry) pause(ctx context.Context) error {
	if r.wait == 0 {
		r.wait, r.until = 10*time.Millisecond, time.Now().Add(settleWait)
	}
	if time.Now().Add(r.wait).After(r.until) {
		return fmt.Errorf("gave up after %v", settleWait)
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	r.wait = min(2*r.wait, 250*time.Millisecond)
	return nil
}

func unsettled(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	// A stream (or bucket) create that failed inside the server (status
	// 500, err_code 10049: its store could not be set up, seen on a
	// loaded machine) says nothing about the request: another try may
	// succeed. A refused configuration has a code of its own.
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 500 && api.ErrorCode == errStreamCreate
}

// errStreamCreate is the err_code of a stream create that failed inside
// the server.
const errStreamCreate jetstream.ErrorCode = 10049
