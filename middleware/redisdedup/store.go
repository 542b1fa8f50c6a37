package redisdedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/middleware"
)

// Store is a middleware.Store in Redis, shared by every process that uses the
// same client and prefix. A claim is SET key "c:<token>" NX PX lease, a
// commit is SET key "d" PX ttl, and an abort deletes the key only while it
// still holds the caller's token (a short Lua script). It works with
// single, sentinel and cluster clients: each operation touches one key.
// It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
}

// New returns a store whose keys are prefix + the Dedup key. An
// empty prefix means "bus:dedup:".
func New(client redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = "bus:dedup:"
	}
	return &Store{client: client, prefix: prefix}
}

const redisDone = "d"

var abortScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Begin implements middleware.Store.
func (s *Store) Begin(ctx context.Context, key, token string, lease time.Duration) (middleware.DedupState, error) {
	k := s.prefix + key
	// A key that expires between SET NX and GET is claimed on the next
	// round; two rounds are enough unless the TTLs are absurdly short.
	for range 3 {
		ok, err := s.client.SetNX(ctx, k, "c:"+token, lease).Result()
		if err != nil {
			return 0, fmt.Errorf("redisdedup: begin: %w", err)
		}
		if ok {
			return middleware.DedupClaimed, nil
		}
		v, err := s.client.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("redisdedup: begin: %w", err)
		}
		if v == redisDone {
			return middleware.DedupDone, nil
		}
		return middleware.DedupBusy, nil
	}
	return middleware.DedupBusy, nil
}

// Commit implements middleware.Store.
func (s *Store) Commit(ctx context.Context, key string, ttl time.Duration) error {
	if err := s.client.Set(ctx, s.prefix+key, redisDone, ttl).Err(); err != nil {
		return fmt.Errorf("redisdedup: commit: %w", err)
	}
	return nil
}

// Abort implements middleware.Store.
func (s *Store) Abort(ctx context.Context, key, token string) error {
	if err := abortScript.Run(ctx, s.client, []string{s.prefix + key}, "c:"+token).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisdedup: abort: %w", err)
	}
	return nil
}
