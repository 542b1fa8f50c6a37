package inmemory

import (
	"context"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.ResultStore = (*Backend)(nil)

// results are the handlers' results of a broker (backend.ResultStore),
// by topic and message ID. A result takes its bytes plus about 100 bytes
// of bookkeeping until its ttl runs out; expired results are dropped by
// the next store after them, at most once a second.
type results struct {
	mu       sync.Mutex
	byKey    map[string]storedResult // topic + "\x00" + id
	nextTrim time.Time
}

type storedResult struct {
	val   []byte
	until time.Time
}

// resultTrimEvery is how often a store drops the expired results.
const resultTrimEvery = time.Second

// StoreResult implements backend.ResultStore.
func (b *Backend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	if err := b.inspectable(ctx, "store result"); err != nil {
		return err
	}
	r := &b.br.results
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = map[string]storedResult{}
	}
	if now.After(r.nextTrim) {
		for k, v := range r.byKey {
			if !now.Before(v.until) {
				delete(r.byKey, k)
			}
		}
		r.nextTrim = now.Add(resultTrimEvery)
	}
	r.byKey[topic+"\x00"+id] = storedResult{val: append([]byte{}, result...), until: now.Add(ttl)}
	return nil
}

// Result implements backend.ResultStore.
func (b *Backend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	if err := b.inspectable(ctx, "result"); err != nil {
		return nil, false, err
	}
	r := &b.br.results
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.byKey[topic+"\x00"+id]
	if !ok || !time.Now().Before(v.until) {
		return nil, false, nil
	}
	return append([]byte{}, v.val...), true, nil
}
