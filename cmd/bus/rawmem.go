package main

import (
	"context"
	"sync"

	"github.com/eventbus-go/bus/internal/rawclient/gochan"
)

// chanTarget is the baseline of mem://: a buffered Go channel
// (gochan.Channel). The channel holds the whole prefill in the consume
// scenario, and chanBuffer messages otherwise; in the publish scenario a
// goroutine drains it, as a broker without subscribers drops what it
// cannot keep.
type chanTarget struct {
	r  *benchRun
	ch *gochan.Channel

	wg   sync.WaitGroup
	quit chan struct{}
	once sync.Once
}

// chanBuffer is the channel's capacity outside the consume scenario.
const chanBuffer = 1024

func openChanTarget(_ context.Context, r *benchRun) (target, error) {
	return &chanTarget{r: r, quit: make(chan struct{})}, nil
}

func (t *chanTarget) backend() string { return "mem" }

func (t *chanTarget) client() string { return "Go channel" }

func (t *chanTarget) prepare(_ context.Context, scenario string) error {
	size := max(chanBuffer, t.r.cfg.MaxInFlight)
	if scenario == scenarioConsume {
		size = t.r.cfg.N
	}
	t.ch = gochan.New(size)
	if scenario == scenarioPublish {
		t.wg.Go(func() { t.ch.Drain(t.quit) })
	}
	return nil
}

func (t *chanTarget) publisher(context.Context) (publisher, error) { return t, nil }

func (t *chanTarget) publish(ctx context.Context, payloads [][]byte) error {
	return t.ch.Publish(ctx, payloads)
}

func (t *chanTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	c := &chanConsumer{t: t, stopped: make(chan struct{})}
	stop := make(chan struct{})
	t.wg.Go(func() {
		select {
		case <-c.stopped:
		case <-t.quit:
		}
		close(stop)
	})
	t.wg.Go(func() { t.ch.Consume(stop, h) })
	return c, nil
}
func (t *chanTarget) close(context.Context) error {
	t.once.Do(func() { close(t.quit) })
	t.wg.Wait()
	return nil
}

type chanConsumer struct {
	t       *chanTarget
	stopped chan struct{}
	once    sync.Once
}

// done is never closed: a channel consumer does not fail.
func (c *chanConsumer) done() <-chan struct{} { return nil }

func (c *chanConsumer) stop(context.Context) error {
	c.once.Do(func() { close(c.stopped) })
	return nil
}

func (c *chanConsumer) err() error { return nil }
