package redisstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.ResultStore = (*Backend)(nil)
	_ backend.ResultAcker = (*subscription)(nil)
)

// resultKey is the key of a result: the topic's stream key (its slot),
// "#result:" and the message ID.
func (b *Backend) resultKey(topic, id string) string {
	return newKeys(b.opts.Prefix, topic).stream + "#result:" + id
}

// StoreResult implements backend.ResultStore with SET PX: the key
// expires with the result. A result costs Redis its bytes, its key and
// about 100 bytes of overhead until then.
func (b *Backend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: store result of %q: %w", topic, backend.ErrClosed)
	}
	err := b.call(ctx, func(ctx context.Context) error {
		return b.client.Set(ctx, b.resultKey(topic, id), result, max(ttl, time.Millisecond)).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstream: store result of %q: %w", topic, err)
	}
	return nil
}

// Result implements backend.ResultStore with GET.
func (b *Backend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	if b.isClosed() {
		return nil, false, fmt.Errorf("redisstream: result of %q: %w", topic, backend.ErrClosed)
	}
	var val []byte
	err := b.call(ctx, func(ctx context.Context) error {
		var err error
		val, err = b.client.Get(ctx, b.resultKey(topic, id)).Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("redisstream: result of %q: %w", topic, err)
	}
	return val, true, nil
}

// AckResult implements backend.ResultAcker: XACK and SET PX in one
// script, so both happen or neither does. Like Ack it settles the entry
// whoever holds it now.
func (s *subscription) AckResult(ctx context.Context, ack backend.AckID, id string, result []byte, ttl time.Duration) error {
	e, ok := entryOf(ack)
	if !ok {
		return s.errf("ack with result", fmt.Errorf("foreign ack id %T", ack))
	}
	keys := []string{s.keys.stream, s.b.resultKey(s.topic, id)}
	if err := s.b.call(ctx, func(ctx context.Context) error {
		return ackResultScript.Run(ctx, s.b.client, keys, s.cfg.Group, e.id, result, max(ttl.Milliseconds(), 1)).Err()
	}); err != nil {
		return s.errf("ack with result", err)
	}
	return nil
}

// ackResultScript acks an entry and stores its result.
//
// KEYS[1] stream, KEYS[2] result. ARGV[1] group, ARGV[2] entry id,
// ARGV[3] result, ARGV[4] ttl in ms. Returns XACK's count.
var ackResultScript = redis.NewScript(`
local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return n
`)
