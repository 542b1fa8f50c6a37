package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Topics implements backend.Inspector: it finds the topic streams under
// the prefix with SCAN ... TYPE stream (on every master of a cluster) and
// reads each one's length, entries added (XINFO STREAM) and first and
// last entries. Bytes are Unknown: Redis reports memory per key only
// through MEMORY USAGE, which samples.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("redisstream: topics: %w", backend.ErrClosed)
	}
	keys, err := b.scanStreams(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisstream: topics: %w", err)
	}
	out := make([]backend.TopicInfo, 0, len(keys))
	for _, k := range keys {
		topic, ok := topicOfKey(b.opts.Prefix, k)
		if !ok {
			continue
		}
		ti := backend.TopicInfo{Name: topic, Messages: backend.Unknown, Bytes: backend.Unknown, Published: backend.Unknown, Scheduled: backend.Unknown}
		err := b.call(ctx, func(ctx context.Context) error {
			info, err := b.client.XInfoStream(ctx, k).Result()
			if err != nil {
				return err
			}
			ti.Messages = backend.Figure(info.Length)
			if info.EntriesAdded >= info.Length {
				// entries-added (Redis 7): every XADD, also of entries
				// trimmed or deleted since.
				ti.Published = backend.Figure(info.EntriesAdded)
			}
			first, err := b.client.XRangeN(ctx, k, "-", "+", 1).Result()
			if err != nil {
				return err
			}
			last, err := b.client.XRevRangeN(ctx, k, "+", "-", 1).Result()
			if err != nil {
				return err
			}
			if len(first) > 0 {
				ti.Oldest = entryTime(first[0].ID)
			}
			if len(last) > 0 {
				ti.Newest = entryTime(last[0].ID)
			}
			n, next, err := scheduled(ctx, b.client, newKeys(b.opts.Prefix, topic))
			if err != nil {
				return err
			}
			ti.Scheduled, ti.NextDue = backend.Figure(n), next
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("redisstream: topics: %q: %w", topic, err)
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(a, b backend.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scanStreams returns the stream keys under the prefix.
func (b *Backend) scanStreams(ctx context.Context) ([]string, error) {
	match := b.opts.Prefix + ":{*"
	keys, err := b.scanKeys(ctx, match, "stream")
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// scanKeys returns the keys that match the pattern (of the type, when
// set), on every master of a cluster.
func (b *Backend) scanKeys(ctx context.Context, match, typ string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.ScanType(ctx, cursor, match, 512, typ).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	err := b.call(ctx, func(ctx context.Context) error {
		if cc, ok := b.client.(*redis.ClusterClient); ok {
			return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		}
		return scan(ctx, b.client)
	})
	return keys, err
}

// topicOfKey inverts streamKey: prefix + ":{" + tag + "}" + rest is the
// topic tag + rest. Helper keys (with '#') are not topics.
func topicOfKey(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok || strings.Contains(rest, "#") {
		return "", false
	}
	tag, tail, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return "", false
	}
	return tag + tail, true
}

// entryTime is the time in a stream entry ID (milliseconds-sequence).
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Groups implements backend.Inspector with XINFO GROUPS (lag is Unknown
// where Redis cannot compute it, for example after entries were deleted)
// and XPENDING for the age of the oldest pending entry. Consumers counts
// the group's consumers (XINFO CONSUMERS) seen within a minute, or
// within the group's ack timeout when it is longer: a live member reads,
// or tells Redis it is alive, at least every 10 s while it has room, and
// extends its leases about every quarter of its ack timeout while it has
// none, so a consumer idle for longer is one whose process died without
// closing (kill -9), and is not counted. (A key-ordered member waiting
// for the group lock reads nothing, and is not counted either.)
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("redisstream: groups: %w", backend.ErrClosed)
	}
	k := streamKey(b.opts.Prefix, topic)
	var out []backend.GroupInfo
	err := b.call(ctx, func(ctx context.Context) error {
		gs, err := b.client.XInfoGroups(ctx, k).Result()
		if err != nil {
			if isNoKey(err) {
				return nil
			}
			return err
		}
		groupsListed(k)
		out = out[:0] // a retried call starts over
		for _, g := range gs {
			gi := backend.GroupInfo{Name: g.Name, Consumers: backend.Figure(g.Consumers), Pending: backend.Figure(g.Pending), Lag: backend.Unknown}
			// A group deleted since XINFO GROUPS (a broadcast group
			// swept, a DeleteGroup) answers NOGROUP below: it is gone,
			// and left out.
			if g.Consumers > 0 {
				n, err := b.liveConsumers(ctx, topic, g.Name)
				if isNoGroup(err) {
					continue
				}
				if err != nil {
					return err
				}
				gi.Consumers = backend.Figure(n)
			}
			if g.Lag >= 0 {
				gi.Lag = backend.Figure(g.Lag)
			}
			if g.Pending > 0 {
				p, err := b.client.XPending(ctx, k, g.Name).Result()
				if isNoGroup(err) {
					continue
				}
				if err != nil {
					return err
				}
				if ext, err := b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k, Group: g.Name, Start: p.Lower, End: p.Lower, Count: 1}).Result(); err == nil && len(ext) == 1 {
					gi.OldestPending = time.Now().Add(-ext[0].Idle)
				}
			}
			out = append(out, gi)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisstream: groups of %q: %w", topic, err)
	}
	slices.SortFunc(out, func(a, b backend.GroupInfo) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []backend.GroupInfo{}
	}
	return out, nil
}

// groupsListed is called by Groups between its XINFO GROUPS and the
// calls per group that follow; a test sets it to delete a group there.
var groupsListed = func(string) {}

// liveConsumerIdle is the idle time (XINFO CONSUMERS) past which Groups
// no longer counts a consumer, unless the group's ack timeout is longer.
var liveConsumerIdle = time.Minute

// liveConsumers counts the consumers of group on topic seen within
// liveConsumerIdle or the group's lease, whichever is longer (see Groups).
func (b *Backend) liveConsumers(ctx context.Context, topic, group string) (int, error) {
	ks := newKeys(b.opts.Prefix, topic)
	bound := liveConsumerIdle
	if ms, err := b.client.HGet(ctx, ks.lease, group).Int64(); err == nil {
		bound = max(bound, time.Duration(ms)*time.Millisecond)
	} else if !errors.Is(err, redis.Nil) {
		return 0, err
	}
	cs, err := b.client.XInfoConsumers(ctx, ks.stream, group).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		if c.Idle <= bound {
			n++
		}
	}
	return n, nil
}

func isNoKey(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such key") || errors.Is(err, redis.Nil))
}

// Peek implements backend.Inspector with XRANGE; the cursor is the stream
// ID of the last entry returned. Malformed entries are skipped.
func (b *Backend) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	if b.isClosed() {
		return nil, "", fmt.Errorf("redisstream: peek: %w", backend.ErrClosed)
	}
	if n < 1 {
		return nil, "", fmt.Errorf("redisstream: peek %q: %w: n %d, want >= 1", topic, ErrInvalidOption, n)
	}
	start := "-"
	if cursor != "" {
		if !validEntryID(cursor) {
			return nil, "", fmt.Errorf("redisstream: peek %q: %w: cursor is not one Peek returned", topic, ErrInvalidOption)
		}
		start = "(" + cursor
	}
	k := streamKey(b.opts.Prefix, topic)
	var entries []redis.XMessage
	err := b.call(ctx, func(ctx context.Context) error {
		var err error
		entries, err = b.client.XRangeN(ctx, k, start, "+", int64(n)).Result()
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("redisstream: peek %q: %w", topic, err)
	}
	out := make([]*backend.Message, 0, len(entries))
	for _, e := range entries {
		var m backend.Message
		if decode(e.ID, e.Values, &m) != nil {
			continue
		}
		out = append(out, &m)
	}
	next := ""
	if len(entries) == n {
		next = entries[len(entries)-1].ID
	}
	return out, next, nil
}

func validEntryID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// Delete implements backend.Inspector: it finds the entries of the listed
// message IDs with XRANGE and removes them with XDEL.
func (b *Backend) Delete(ctx context.Context, topic string, ids []string) (int, error) {
	if b.isClosed() {
		return 0, fmt.Errorf("redisstream: delete: %w", backend.ErrClosed)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	k := streamKey(b.opts.Prefix, topic)
	deleted := 0
	err := b.call(ctx, func(ctx context.Context) error {
		start := "-"
		for {
			entries, err := b.client.XRangeN(ctx, k, start, "+", 512).Result()
			if err != nil {
				return err
			}
			var del []string
			for _, e := range entries {
				var m backend.Message
				if decode(e.ID, e.Values, &m) == nil && want[m.ID] {
					del = append(del, e.ID)
				}
			}
			if len(del) > 0 {
				n, err := b.client.XDel(ctx, k, del...).Result()
				if err != nil {
					return err
				}
				deleted += int(n)
			}
			if len(entries) < 512 {
				return nil
			}
			start = "(" + entries[len(entries)-1].ID
		}
	})
	if err != nil {
		return deleted, fmt.Errorf("redisstream: delete from %q: %w", topic, err)
	}
	return deleted, nil
}

// DeleteTopic implements backend.TopicDeleter: it deletes the topic's
// keys in one script, by name, without a scan of the keyspace: the
// stream, and with it every message and consumer group of the topic, its
// schedule, holds and leases, its partition count, the IDs its dedup
// window remembers, and the locks and last holders of its groups (those
// in the topic's lock registry and those on its stream). A subscription
// still live on the topic recreates its group and stream on its next
// read. The topic's dead-letter topic, a topic of its own, is left alone.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: delete topic %q: %w", topic, backend.ErrClosed)
	}
	k := newKeys(b.opts.Prefix, topic)
	del := []string{k.stream, k.locks, k.hold, k.held, k.lease, k.sched, k.due, k.ids[0], k.ids[1], b.partsKey(topic)}
	err := b.call(ctx, func(ctx context.Context) error { return deleteTopicScript.Run(ctx, b.client, del).Err() })
	if err != nil {
		return fmt.Errorf("redisstream: delete topic %q: %w", topic, err)
	}
	return nil
}

var _ backend.TopicDeleter = (*Backend)(nil)
