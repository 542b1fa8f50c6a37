package redisstream

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Partitioner = (*Backend)(nil)

// partsKey is the key of topic's partition count; membersKey the sorted
// set of group's live members (score: alive until, Unix ms of Redis's
// clock). Both live in the topic's slot.
func (b *Backend) partsKey(topic string) string {
	return newKeys(b.opts.Prefix, topic).stream + "#parts"
}

func (b *Backend) membersKey(topic, group string) string {
	return newKeys(b.opts.Prefix, topic).stream + "#members:" + group
}

// partitionsScript returns the recorded count, recording ARGV[1] first
// when none is and it is above 0. KEYS[1] the count.
var partitionsScript = redis.NewScript(`
local c = redis.call('GET', KEYS[1])
if c then return tonumber(c) end
local n = tonumber(ARGV[1])
if n > 0 then redis.call('SET', KEYS[1], ARGV[1]) end
return n
`)

// heartbeatScript forgets the members whose time ran out by Redis's clock,
// records ARGV[1] (unless empty) until ARGV[2] ms from now, and returns
// the live members. KEYS[1] the members.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[1] ~= '' then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < 3 * ttl then redis.call('PEXPIRE', KEYS[1], 3 * ttl) end
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)

// Partitions implements backend.Partitioner.
func (b *Backend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	if b.isClosed() {
		return 0, fmt.Errorf("redisstream: partitions of %q: %w", topic, backend.ErrClosed)
	}
	var c int64
	err := b.call(ctx, func(ctx context.Context) error {
		var err error
		c, err = partitionsScript.Run(ctx, b.client, []string{b.partsKey(topic)}, n).Int64()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redisstream: partitions of %q: %w", topic, err)
	}
	return int(c), nil
}

// Heartbeat implements backend.Partitioner; members expire by Redis's
// clock, the same for every member.
func (b *Backend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	return b.members(ctx, topic, group, member, ttl)
}

// Members implements backend.Partitioner.
func (b *Backend) Members(ctx context.Context, topic, group string) ([]string, error) {
	return b.members(ctx, topic, group, "", 0)
}

func (b *Backend) members(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("redisstream: members of group %q on %q: %w", group, topic, backend.ErrClosed)
	}
	var ms []string
	err := b.call(ctx, func(ctx context.Context) error {
		var err error
		ms, err = heartbeatScript.Run(ctx, b.client, []string{b.membersKey(topic, group)}, member, max(ttl.Milliseconds(), 1)).StringSlice()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redisstream: members of group %q on %q: %w", group, topic, err)
	}
	slices.Sort(ms)
	return ms, nil
}

// Leave implements backend.Partitioner.
func (b *Backend) Leave(ctx context.Context, topic, group, member string) error {
	err := b.call(ctx, func(ctx context.Context) error {
		return b.client.ZRem(ctx, b.membersKey(topic, group), member).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstream: leave group %q on %q: %w", group, topic, err)
	}
	return nil
}
