package nats

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupLocker = (*Backend)(nil)

// locksKV returns the bucket of the group locks (one per StreamPrefix,
// with the streams' replicas).
func (b *Backend) locksKV(ctx context.Context) (jetstream.KeyValue, error) {
	return b.kvBucket(ctx, &b.locks, jetstream.KeyValueConfig{
		Bucket:      b.bucketName("_LOCKS"),
		Description: "the bus's group locks (which member of a key-ordered group consumes) and partitioned topics' counts and members",
		Replicas:    b.opts.Replicas,
	})
}

// lockKey names the lock of group on topic in the bucket (hex: topics and
// groups hold characters keys cannot).
func lockKey(topic, group string) string {
	return hex.EncodeToString([]byte(topic)) + "." + hex.EncodeToString([]byte(group))
}

// forgetLocks purges the group locks of topic from the bucket (a lock
// whose holder died stays there with its expiry), for DeleteTopic.
func (b *Backend) forgetLocks(ctx context.Context, topic string) error {
	return b.purgeKeys(ctx, b.bucketName("_LOCKS"), hex.EncodeToString([]byte(topic))+".*")
}

// LockGroup implements backend.GroupLocker with compare-and-set on a
// key-value bucket, reading the lock from the leader of the bucket's
// stream (leaderGet). A lock is "<holder>\n<expiry, Unix ms>": the expiry
// is the writer's clock, so members' clocks must agree to well within the
// lock's ttl.
func (b *Backend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	if b.closed.Load() {
		return false, false, fmt.Errorf("nats: lock group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	if b.opts.CoreNATS {
		return false, false, fmt.Errorf("nats: lock group %q of %q: %w: core NATS has no key-value store", group, topic, backend.ErrUnsupported)
	}
	kv, err := b.locksKV(ctx)
	if err != nil {
		return false, false, fmt.Errorf("nats: lock group %q of %q: %w", group, topic, err)
	}
	key := lockKey(topic, group)
	now := time.Now()
	val := []byte(holder + "\n" + strconv.FormatInt(now.Add(ttl).UnixMilli(), 10))
	e, err := b.leaderGet(ctx, kv, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Set against the marker the leader has (or on no message at
		// all), not through KeyValue.Create: after an unlock, its
		// fallback reads the marker through any replica, and one that
		// is behind still shows the old holder.
		_, err = kv.Update(ctx, key, val, e.rev)
		if err != nil && isConflict(err) {
			return false, false, nil
		}
		return err == nil, false, wrapLockErr(topic, group, err)
	case err != nil:
		return false, false, wrapLockErr(topic, group, err)
	}
	cur, until := parseLock(e.value)
	if cur != holder && now.Before(until) {
		return false, false, nil
	}
	_, err = kv.Update(ctx, key, val, e.rev)
	if err != nil && isConflict(err) {
		return false, false, nil
	}
	return err == nil, err == nil && cur != holder, wrapLockErr(topic, group, err)
}

// UnlockGroup implements backend.GroupLocker.
func (b *Backend) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	if b.opts.CoreNATS {
		return nil
	}
	kv, err := b.locksKV(ctx)
	if err != nil {
		return fmt.Errorf("nats: unlock group %q of %q: %w", group, topic, err)
	}
	key := lockKey(topic, group)
	e, err := b.leaderGet(ctx, kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nats: unlock group %q of %q: %w", group, topic, err)
	}
	if cur, _ := parseLock(e.value); cur != holder {
		return nil
	}
	if b.takeBehind(key) {
		// The holder's member left deliveries behind: the lock lapses
		// now, and the next holder takes it over.
		val := []byte(holder + "\n" + strconv.FormatInt(time.Now().UnixMilli(), 10))
		if _, err := kv.Update(ctx, key, val, e.rev); err != nil && !isConflict(err) {
			return fmt.Errorf("nats: unlock group %q of %q: %w", group, topic, err)
		}
		return nil
	}
	// Purge leaves no value, so the next Get finds the key free: an unlock,
	// not a lapse.
	if err := kv.Purge(ctx, key, jetstream.LastRevision(e.rev)); err != nil && !isConflict(err) {
		return fmt.Errorf("nats: unlock group %q of %q: %w", group, topic, err)
	}
	return nil
}

// leaveBehind records that a member of group on topic closed a
// subscription that may have left deliveries pending at the server until
// their AckWait (see jsSub.leavesBehind).
func (b *Backend) leaveBehind(topic, group string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.behind == nil {
		b.behind = map[string]struct{}{}
	}
	b.behind[lockKey(topic, group)] = struct{}{}
}

// takeBehind reports whether leaveBehind recorded the lock key since the
// last call for it.
func (b *Backend) takeBehind(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.behind[key]
	delete(b.behind, key)
	return ok
}

func parseLock(v []byte) (holder string, until time.Time) {
	h, ms, ok := strings.Cut(string(v), "\n")
	if !ok {
		return "", time.Time{}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return "", time.Time{}
	}
	return h, time.UnixMilli(n)
}

func wrapLockErr(topic, group string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("nats: lock group %q of %q: %w", group, topic, err)
}
