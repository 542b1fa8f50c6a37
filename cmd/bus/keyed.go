package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// scenarioKeyed is e2e on a key-ordered group: every message has one of
// --keys keys (round robin), --members members (each a Bus of its own in
// this process) share the group with bus.WithKeyOrdering, and each
// handler takes --handler-delay. The run checks the order of every key
// itself: a key's message handled after a later one of the same key is
// an order violation, and any violation fails the run.
const scenarioKeyed = "keyed"

// keyedConfig are the flags of the keyed scenario.
type keyedConfig struct {
	Members      int
	Partitions   int
	Keys         int
	HandlerDelay time.Duration
}

func (c *benchConfig) validateKeyed() []error {
	var errs []error
	if c.Scenario != scenarioKeyed {
		if c.Members > 1 || c.Keys != 0 || c.Partitions > 1 {
			errs = append(errs, errors.New("--members, --keys and --partitions belong to --scenario keyed"))
		}
		if c.HandlerDelay != 0 && c.Scenario != scenarioBacklog {
			errs = append(errs, errors.New("--handler-delay belongs to --scenario keyed or backlog"))
		}
		return errs
	}
	if c.Members < 1 {
		errs = append(errs, fmt.Errorf("--members %d: want >= 1", c.Members))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions %d: want >= 1", c.Partitions))
	}
	if c.Keys < 1 {
		errs = append(errs, fmt.Errorf("--keys %d: want >= 1", c.Keys))
	}
	if c.HandlerDelay < 0 {
		errs = append(errs, fmt.Errorf("--handler-delay %v: want >= 0", c.HandlerDelay))
	}
	if c.Publishers != 1 {
		errs = append(errs, errors.New("--publishers: the keyed scenario checks publish order, which one publisher defines"))
	}
	if c.Baseline {
		errs = append(errs, errors.New("--baseline: the raw clients have no key ordering to compare with"))
	}
	return errs
}

// keyOf is the key of message seq.
func (c *benchConfig) keyOf(seq uint64) string {
	return "k" + strconv.FormatUint(seq%uint64(c.Keys), 10)
}

// keyedURL gives the members of a keyed run one broker: a private mem://
// broker becomes a named one.
func keyedURL(cfg benchConfig, nonce uint64) string {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "mem" || u.Host != "" {
		return cfg.URL
	}
	_, query, _ := strings.Cut(cfg.URL, "?")
	named := fmt.Sprintf("mem://bench-keyed-%x", nonce)
	if query != "" {
		named += "?" + query
	}
	return named
}

// orderCheck records the last sequence number handled per key.
type orderCheck struct {
	mu         sync.Mutex
	last       []int64
	violations int64
}

func newOrderCheck(keys int) *orderCheck {
	o := &orderCheck{last: make([]int64, keys)}
	for i := range o.last {
		o.last[i] = -1
	}
	return o
}

// handled records seq; a sequence number below the key's last one is a
// violation (a redelivery of the last one itself is not).
func (o *orderCheck) handled(seq uint64) {
	k := seq % uint64(len(o.last))
	o.mu.Lock()
	if int64(seq) < o.last[k] {
		o.violations++
	} else {
		o.last[k] = int64(seq)
	}
	o.mu.Unlock()
}

func (o *orderCheck) count() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.violations
}

// members subscribes the other members of a keyed run, each on a Bus of
// its own, with h; the first member is t's own subscription.
func (t *busTarget) members(ctx context.Context, h bus.Handler) ([]*bus.Subscription, error) {
	var subs []*bus.Subscription
	for range t.r.cfg.Members - 1 {
		b, err := bus.Open(ctx, t.url, bus.WithObserver(observer.Func(t.r.observe)))
		if err != nil {
			return subs, err
		}
		t.extra = append(t.extra, b)
		sub, err := t.subOn(ctx, b, h)
		if err != nil {
			return subs, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// keyedHandler wraps h for the keyed scenario: the handler delay, then
// the order check.
func (t *busTarget) keyedHandler(h func([]byte)) func([]byte) {
	delay, check := t.r.cfg.HandlerDelay, t.r.order
	return func(p []byte) {
		if delay > 0 {
			time.Sleep(delay) // the work of a handler
		}
		if seq, ok := t.r.seqOf(p); ok {
			check.handled(seq)
		}
		h(p)
	}
}

// manyConsumers is the consumer of a keyed run: every member.
type manyConsumers []*bus.Subscription

func (m manyConsumers) done() <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, s := range m {
		go func() {
			<-s.Done()
			once.Do(func() { close(ch) })
		}()
	}
	return ch
}

func (m manyConsumers) stop(ctx context.Context) error {
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, s := range m {
		wg.Go(func() { errs[i] = s.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m manyConsumers) err() error {
	for _, s := range m {
		if err := s.Err(); err != nil {
			return err
		}
	}
	return nil
}
