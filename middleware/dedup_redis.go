package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis, shared by every process that uses the
// same client and prefix. A claim is SET key "c:<token>" NX PX lease, a
// commit is SET key "d" PX ttl, and an abort deletes the key only while it
// still holds the caller's token (a short Lua script). It works with
// single, sentinel and cluster clients: each operation touches one key.
// It is safe for concurrent use.
type RedisStore struct {
	client redis.UniversalClient
	prefix string
}

// NewRedisStore returns a store whose keys are prefix + the Dedup key. An
// empty prefix means "bus:dedup:".
func NewRedisStore(client redis.UniversalClient, prefix string) *RedisStore {
	if prefix == "" {
		prefix = "bus:dedup:"
	}
	return &RedisStore{client: client, prefix: prefix}
}

const redisDone = "d"

var abortScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Begin implements Store.
func (s *RedisStore) Begin(ctx context.Context, key, token string, lease time.Duration) (DedupState, error) {
	k := s.prefix + key
	// A key that expires between SET NX and GET is claimed on the next
	// round; two rounds are enough unless the TTLs are absurdly short.
	for range 3 {
		ok, err := s.client.SetNX(ctx, k, "c:"+token, lease).Result()
		if err != nil {
			return 0, fmt.Errorf("redis dedup begin: %w", err)
		}
		if ok {
			return DedupClaimed, nil
		}
		v, err := s.client.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("redis dedup begin: %w", err)
		}
		if v == redisDone {
			return DedupDone, nil
		}
		return DedupBusy, nil
	}
	return DedupBusy, nil
}

// Commit implements Store.
func (s *RedisStore) Commit(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.client.Set(ctx, s.prefix+key, redisDone, ttl).Err(); err != nil {
		return fmt.Errorf("redis dedup commit: %w", err)
	}
	return nil
}

// Abort implements Store.
func (s *RedisStore) Abort(ctx context.Context, key, token string) error {
	if err := abortScript.Run(ctx, s.client, []string{s.prefix + key}, "c:"+token).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis dedup abort: %w", err)
	}
	return nil
}
