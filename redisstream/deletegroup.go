package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupDeleter = (*Backend)(nil)

// DeleteGroup implements backend.GroupDeleter in one script: XGROUP
// DESTROY (the group's position and pending entries), the group's field
// of the lease hash, its holds (nacks waiting out a delay, in the hold
// index and ZSET), and its group lock, last holder and place in the
// topic's lock registry. A member still reading the group finds it gone
// (NOGROUP) and re-creates it, as after a server that lost its data; the
// bus deletes a broadcast group only after its member closed or stopped
// renewing the group's lease.
func (b *Backend) DeleteGroup(ctx context.Context, topic, group string) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: delete group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	k := newKeys(b.opts.Prefix, topic)
	lock := b.lockKeys(topic, group)
	keys := []string{k.stream, k.lease, k.held, k.hold, lock[0], lock[1], k.locks}
	err := b.call(ctx, func(ctx context.Context) error {
		return deleteGroupScript.Run(ctx, b.client, keys, group).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstream: delete group %q of %q: %w", group, topic, err)
	}
	return nil
}

// deleteGroupScript deletes a consumer group and every key's part of it.
// A hold's ZSET member is its index field, "\0" and its index value up
// to the value's second "\0" (see nackScript). Group names hold no glob
// characters, so the HSCAN pattern matches the group's fields alone.
//
// KEYS[1] stream, KEYS[2] lease HASH, KEYS[3] hold index, KEYS[4] hold
// ZSET, KEYS[5] lock, KEYS[6] last holder, KEYS[7] lock registry.
// ARGV[1] group. Returns 1.
var deleteGroupScript = redis.NewScript(`
redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local cursor = '0'
repeat
  local r = redis.call('HSCAN', KEYS[3], cursor, 'MATCH', ARGV[1] .. '\0*', 'COUNT', 256)
  cursor = r[1]
  local kv = r[2]
  for i = 1, #kv, 2 do
    local f, v = kv[i], kv[i + 1]
    local a = string.find(v, '\0', 1, true)
    local z = a and string.find(v, '\0', a + 1, true)
    if z then redis.call('ZREM', KEYS[4], f .. '\0' .. string.sub(v, 1, z - 1)) end
    redis.call('HDEL', KEYS[3], f)
  end
until cursor == '0'
redis.call('DEL', KEYS[5], KEYS[6])
redis.call('ZREM', KEYS[7], ARGV[1])
return 1
`)
