package nats

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.ResultStore = (*Backend)(nil)

// Results live in key-value buckets, one per ttl (named from the ttl in
// ms): a bucket's max age is its results' ttl, since a bucket before
// nats-server 2.11 has no ttl per key. A result costs the bucket's
// stream its bytes, its key and about 100 bytes until its ttl. Result
// looks in every result bucket of the backend; the list of buckets is
// read again, at most once a second, when a result is not found.
type resultBuckets struct {
	mu      sync.Mutex
	byTTL   map[time.Duration]*releases
	byName  map[string]jetstream.KeyValue
	listed  time.Time
	names   []string
	pending bool // a store made a bucket since the list was read
}

// resultRelist is how often Result reads the list of result buckets
// again while it does not find a result.
const resultRelist = time.Second

// resultPrefix begins the name of every result bucket.
func (b *Backend) resultPrefix() string { return b.bucketName("_RESULTS_") }

// resultKey names the result of message id of topic in a bucket (hex:
// topics and IDs hold characters keys cannot).
func resultKey(topic, id string) string {
	return hex.EncodeToString([]byte(topic)) + "." + hex.EncodeToString([]byte(id))
}

// StoreResult implements backend.ResultStore on JetStream: a Put in the
// bucket of ttl. Core NATS keeps nothing: there it returns an error
// wrapping ErrUnsupported.
func (b *Backend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	if err := b.inspectable("store result"); err != nil {
		return err
	}
	ttl = max(ttl.Truncate(time.Millisecond), time.Second)
	kv, err := b.resultBucket(ctx, ttl)
	if err != nil {
		return fmt.Errorf("nats: store result of %q: %w", topic, err)
	}
	if _, err := kv.Put(ctx, resultKey(topic, id), result); err != nil {
		return fmt.Errorf("nats: store result of %q: %w", topic, err)
	}
	return nil
}

// resultBucket returns the bucket of ttl, creating it the first time.
func (b *Backend) resultBucket(ctx context.Context, ttl time.Duration) (jetstream.KeyValue, error) {
	rb := &b.results
	rb.mu.Lock()
	if rb.byTTL == nil {
		rb.byTTL = map[time.Duration]*releases{}
	}
	r := rb.byTTL[ttl]
	if r == nil {
		r = &releases{}
		rb.byTTL[ttl] = r
	}
	rb.mu.Unlock()
	kv, err := b.kvBucket(ctx, r, jetstream.KeyValueConfig{
		Bucket:      b.resultPrefix() + strconv.FormatInt(ttl.Milliseconds(), 10),
		Description: "the handlers' results the bus keeps for " + ttl.String(),
		TTL:         ttl,
		Replicas:    b.opts.Replicas,
	})
	if err == nil {
		rb.mu.Lock()
		rb.pending = true
		rb.mu.Unlock()
	}
	return kv, err
}

// Result implements backend.ResultStore: it looks in every result bucket
// for the key, and takes an entry for a result while its bucket's ttl
// has not run out since it was stored.
func (b *Backend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	if err := b.inspectable("result"); err != nil {
		return nil, false, err
	}
	names, err := b.resultBucketNames(ctx, false)
	if err != nil {
		return nil, false, fmt.Errorf("nats: result of %q: %w", topic, err)
	}
	for again := true; ; again = false {
		for _, name := range names {
			r, found, err := b.resultIn(ctx, name, resultKey(topic, id))
			if err != nil || found {
				return r, found, err
			}
		}
		if !again {
			return nil, false, nil
		}
		fresh, err := b.resultBucketNames(ctx, true)
		if err != nil {
			return nil, false, fmt.Errorf("nats: result of %q: %w", topic, err)
		}
		if len(fresh) == len(names) {
			return nil, false, nil
		}
		names = fresh
	}
}

// resultIn reads key in the result bucket name.
func (b *Backend) resultIn(ctx context.Context, name, key string) ([]byte, bool, error) {
	ms, err := strconv.ParseInt(strings.TrimPrefix(name, b.resultPrefix()), 10, 64)
	if err != nil {
		return nil, false, nil // not a bucket of this backend's making
	}
	kv, err := b.resultKV(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("bucket %q: %w", name, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("bucket %q: %w", name, err)
	}
	if !time.Now().Before(e.Created().Add(time.Duration(ms) * time.Millisecond)) {
		return nil, false, nil
	}
	return e.Value(), true, nil
}

// resultKV returns the handle of the result bucket name.
func (b *Backend) resultKV(ctx context.Context, name string) (jetstream.KeyValue, error) {
	rb := &b.results
	rb.mu.Lock()
	kv := rb.byName[name]
	rb.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := b.js.KeyValue(ctx, name)
	if err != nil {
		return nil, err
	}
	rb.mu.Lock()
	if rb.byName == nil {
		rb.byName = map[string]jetstream.KeyValue{}
	}
	rb.byName[name] = kv
	rb.mu.Unlock()
	return kv, nil
}

// resultBucketNames lists the result buckets: the last list, read again
// when it is older than resultRelist (or, with fresh, when a store made
// a bucket since or it is older than resultRelist).
func (b *Backend) resultBucketNames(ctx context.Context, fresh bool) ([]string, error) {
	rb := &b.results
	rb.mu.Lock()
	stale := time.Since(rb.listed) > resultRelist || fresh && rb.pending
	names := rb.names
	rb.mu.Unlock()
	if !stale {
		return names, nil
	}
	lister := b.js.KeyValueStoreNames(ctx)
	var got []string
	for name := range lister.Name() {
		if strings.HasPrefix(name, b.resultPrefix()) {
			got = append(got, name)
		}
	}
	if err := lister.Error(); err != nil {
		return nil, err
	}
	rb.mu.Lock()
	rb.names, rb.listed, rb.pending = got, time.Now(), false
	rb.mu.Unlock()
	return got, nil
}
