package nats

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.Releaser = (*jsSub)(nil)
	_ backend.Snoozer  = (*jsSub)(nil)
)

// JetStream keeps the delivery count of a message itself and cannot lower
// it, so a released delivery (backend.Releaser) is recorded at the broker,
// in a key-value bucket of the backend's (releasedBucket), and taken off
// the count when the message is delivered again: Attempt is the server's
// count less the releases of that message for that consumer. Only
// redeliveries pay for the lookup; the key is deleted when the message is
// acked or dead-lettered, and the bucket forgets a key after
// releasedMaxAge, so a crash leaves nothing forever (a release older than
// that counts as an attempt again).
const releasedMaxAge = 7 * 24 * time.Hour

// releaseDelay outlasts the pull requests of a member that is closing.
const releaseDelay = longPoll + responseGrace

// releaseTries bounds the compare-and-set rounds of one release.
const releaseTries = 5

// releases is one of the backend's key-value buckets, made on first use
// (kvBucket).
type releases struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

// bucketName names a key-value bucket of the backend: the stream prefix
// and suffix, with the characters a bucket name cannot hold replaced.
func (b *Backend) bucketName(suffix string) string {
	name := []byte(b.opts.StreamPrefix + suffix)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			name[i] = '_'
		}
	}
	return string(name)
}

// releasedBucket names the bucket of the backend's released deliveries.
func (b *Backend) releasedBucket() string { return b.bucketName("_RELEASED") }

// kvBucket returns the bucket of r, creating it with cfg the first time,
// in the backend's storage.
func (b *Backend) kvBucket(ctx context.Context, r *releases, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	cfg.Storage = jetstream.FileStorage
	if b.opts.Storage == StorageMemory {
		cfg.Storage = jetstream.MemoryStorage
	}
	var kv jetstream.KeyValue
	err := settled(ctx, func() error {
		var err error
		kv, err = b.js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %q: %w", cfg.Bucket, err)
	}
	r.kv = kv
	return kv, nil
}

// releasedKV returns the bucket of released deliveries.
func (b *Backend) releasedKV(ctx context.Context) (jetstream.KeyValue, error) {
	return b.kvBucket(ctx, &b.released, jetstream.KeyValueConfig{
		Bucket:      b.releasedBucket(),
		Description: "deliveries the bus gave back at shutdown, not counted as attempts",
		TTL:         releasedMaxAge,
	})
}

// releaseKey names a message of a consumer in the bucket.
func (s *jsSub) releaseKey(streamSeq uint64) string {
	return s.stream + "." + s.consumer + "." + strconv.FormatUint(streamSeq, 10)
}

// Release implements backend.Releaser: it records the release in the
// bucket, then sends -NAK with a delay of releaseDelay. The bus releases
// while it closes the member, whose last pull request may still be open
// at the server for up to longPoll: without the delay the server could
// hand the message straight back to that request, whose inbox nobody
// reads any more, and it would wait there for its AckWait. When the
// release cannot be recorded the message is still nacked (and the
// delivery counts), and the error says so.
func (s *jsSub) Release(ctx context.Context, id backend.AckID) error {
	return s.giveBack(ctx, "release", id, releaseDelay)
}

// Snooze implements backend.Snoozer: it records the snooze in the bucket
// as Release does, then sends -NAK with the delay. The server counts
// every delivery against the consumer's MaxDeliver, which leaves room for
// releasedDeliveries uncounted ones (see maxDeliver): once a message has
// been delivered that often, Snooze returns an error wrapping
// backend.ErrSnoozeLimit and the bus nacks it, counted.
func (s *jsSub) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "snooze", id, delay)
}

// giveBack records an uncounted delivery of id and nacks it with delay.
func (s *jsSub) giveBack(ctx context.Context, op string, id backend.AckID, delay time.Duration) error {
	a, err := s.live(op, id)
	if err != nil {
		return err
	}
	meta, err := parseAckSubject(a.reply)
	if err != nil {
		return fmt.Errorf("nats: %s %q: %w", op, s.topic, err)
	}
	if op == "snooze" && meta.delivered >= releasedDeliveries {
		return fmt.Errorf("nats: snooze %q: delivered %d times: %w", s.topic, meta.delivered, backend.ErrSnoozeLimit)
	}
	recErr := s.recordRelease(ctx, s.releaseKey(meta.streamSeq))
	body := nakBody
	if delay > 0 {
		body = fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	if err := s.send(op, id, body); err != nil {
		return err
	}
	if recErr != nil {
		return fmt.Errorf("nats: %s %q: the delivery was nacked and counts: %w", op, s.topic, recErr)
	}
	return nil
}

// recordRelease adds one release to key, with compare-and-set. Most
// messages are released once, so it creates the key first: one round
// trip, and more only when the key is there already.
func (s *jsSub) recordRelease(ctx context.Context, key string) error {
	kv, err := s.b.releasedKV(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Create(ctx, key, encodeCount(1))
	for try := 0; err != nil && isConflict(err); try++ {
		if try == releaseTries {
			return fmt.Errorf("record the release of %s: too many concurrent updates", key)
		}
		var e jetstream.KeyValueEntry
		e, err = kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = kv.Create(ctx, key, encodeCount(1))
		case err == nil:
			_, err = kv.Update(ctx, key, encodeCount(decodeCount(e.Value())+1), e.Revision())
		}
	}
	return err
}

// isConflict reports whether a compare-and-set lost the race.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence")
}

func encodeCount(n uint64) []byte { return binary.AppendUvarint(nil, n) }

func decodeCount(b []byte) uint64 {
	n, _ := binary.Uvarint(b)
	return n
}

// correctAttempts takes the recorded releases off the Attempt of the
// redeliveries in msgs. A lookup that fails leaves the server's count,
// which can only dead-letter a message early, never lose it. The lookups
// run concurrently: one after the other, they held the fetch loop back
// by a round trip per redelivery, and a batch of deliveries given back
// together comes back together.
func (s *jsSub) correctAttempts(ctx context.Context, msgs []*backend.Message) {
	var redelivered []*backend.Message
	for _, m := range msgs {
		if m.Attempt > 1 {
			redelivered = append(redelivered, m)
		}
	}
	if len(redelivered) == 0 {
		return
	}
	kv, err := s.b.releasedKV(ctx)
	if err != nil {
		return
	}
	each(len(redelivered), func(i int) {
		m := redelivered[i]
		a := m.AckID.(*jsAckID)
		meta, err := parseAckSubject(a.reply)
		if err != nil {
			return
		}
		key := s.releaseKey(meta.streamSeq)
		e, err := kv.Get(ctx, key)
		if err != nil {
			return
		}
		if n := int(decodeCount(e.Value())); n > 0 {
			m.Attempt = max(m.Attempt-n, 1)
			a.released = key
		}
	})
}

// forgetReleases deletes the release records of settled deliveries,
// concurrently and best effort: a record left behind expires with the
// bucket's max age.
func (s *jsSub) forgetReleases(ctx context.Context, ids []backend.AckID) {
	var keys []string
	for _, id := range ids {
		if a, ok := id.(*jsAckID); ok && a != nil && a.released != "" {
			keys = append(keys, a.released)
		}
	}
	if len(keys) == 0 {
		return
	}
	kv, err := s.b.releasedKV(ctx)
	if err != nil {
		return
	}
	each(len(keys), func(i int) { _ = kv.Delete(ctx, keys[i]) })
}

// kvParallel bounds the key-value requests of one call in flight at
// once.
const kvParallel = 32

// each runs f(0) ... f(n-1), at most kvParallel at a time, and returns
// when all have returned.
func each(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, kvParallel) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
