package nats

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

// sharedTrimInterval is how often a Backend with a shared stream purges
// its bounded topics down to their length.
const sharedTrimInterval = time.Second

// boundTrimmer purges the bounded topics of a shared stream (where a
// topic has no stream limits of its own) every sharedTrimInterval.
type boundTrimmer struct {
	mu     sync.Mutex
	bounds map[string]int64 // topic -> messages to keep
	stop   chan struct{}
	closed bool
	wg     sync.WaitGroup
}

// BoundRetention caps topic at bound.MaxAge and bound.MaxLen messages,
// with no subscriber running. With a stream per topic (the default) it
// sets the stream's max_age and max_msgs, lowering the limits the stream
// has (the server then enforces them exactly, with DiscardOld); it
// creates the stream when it does not exist yet, and shortens its
// dedup window (duplicates) to max_age when it is longer, as the server
// requires. With a shared stream,
// where limits would apply to every topic, the Backend purges the
// topic's subject down to its newest MaxLen messages every second, and
// the age is the shared stream's max_age. A stream the backend only
// binds to (bind=true) keeps the limits its owner gave it, and core NATS
// stores nothing. It implements backend.RetentionBounder.
func (b *Backend) BoundRetention(ctx context.Context, topic string, bound backend.RetentionBound) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: bound retention of %q: %w", topic, backend.ErrClosed)
	}
	if bound.MaxLen < 0 || bound.MaxAge < 0 {
		return fmt.Errorf("nats: bound retention of %q: %w: negative bound", topic, ErrInvalidOption)
	}
	if b.opts.CoreNATS || b.opts.BindOnly {
		return nil
	}
	if b.opts.StreamMode == StreamShared {
		if bound.MaxLen > 0 {
			b.trimmer.add(b, topic, bound.MaxLen)
		}
		return nil
	}
	if _, err := b.ensureStream(ctx, topic); err != nil {
		return fmt.Errorf("nats: bound retention of %q: %w", topic, err)
	}
	name := b.streamFor(topic)
	st, err := b.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("nats: bound retention of %q: stream %q: %w", topic, name, err)
	}
	cfg := st.CachedInfo().Config
	changed := false
	if bound.MaxAge > 0 && (cfg.MaxAge <= 0 || bound.MaxAge < cfg.MaxAge) {
		cfg.MaxAge, changed = bound.MaxAge, true
		// The server wants the dedup window within max_age.
		cfg.Duplicates = min(cfg.Duplicates, cfg.MaxAge)
	}
	if bound.MaxLen > 0 && (cfg.MaxMsgs <= 0 || bound.MaxLen < cfg.MaxMsgs) {
		cfg.MaxMsgs, changed = bound.MaxLen, true
	}
	if !changed {
		return nil
	}
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("nats: bound retention of %q: update stream %q: %w", topic, name, err)
	}
	return nil
}

// add bounds topic to keep messages and starts the purge loop once.
func (t *boundTrimmer) add(b *Backend, topic string, keep int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if t.bounds == nil {
		t.bounds = map[string]int64{}
		t.stop = make(chan struct{})
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.run(b)
		}()
	}
	t.bounds[topic] = keep
}

func (t *boundTrimmer) run(b *Backend) {
	ticker := time.NewTicker(sharedTrimInterval)
	defer ticker.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-ticker.C:
		}
		t.mu.Lock()
		bounds := make(map[string]int64, len(t.bounds))
		for k, v := range t.bounds {
			bounds[k] = v
		}
		t.mu.Unlock()
		for topic, keep := range bounds {
			t.purge(b, topic, keep)
		}
	}
}

// purge purges topic's subject of the shared stream down to keep
// messages. A failure is retried on the next tick.
func (t *boundTrimmer) purge(b *Backend, topic string, keep int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := b.js.Stream(ctx, b.streamFor(topic))
	if err != nil {
		return
	}
	_ = st.Purge(ctx, jetstream.WithPurgeSubject(b.subjectFor(topic)), jetstream.WithPurgeKeep(uint64(keep)))
}

// close stops the purge loop and waits for it.
func (t *boundTrimmer) close() {
	t.mu.Lock()
	if t.stop != nil && !t.closed {
		close(t.stop)
	}
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
