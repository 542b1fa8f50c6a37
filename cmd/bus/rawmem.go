package main

import (
	"context"
	"sync"
)

// chanTarget is the baseline of mem://: a buffered Go channel. Publish
// copies each payload into a new slice (an in-process broker cannot keep
// the caller's buffer) and sends it; one goroutine receives and handles.
// The channel holds the whole prefill in the consume scenario, and
// chanBuffer messages otherwise; in the publish scenario a goroutine
// drains it, as a broker without subscribers drops what it cannot keep.
type chanTarget struct {
	r  *benchRun
	ch chan []byte

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
	t.ch = make(chan []byte, size)
	if scenario == scenarioPublish {
		t.wg.Go(func() {
			for {
				select {
				case <-t.ch:
				case <-t.quit:
					return
				}
			}
		})
	}
	return nil
}

func (t *chanTarget) publisher(context.Context) (publisher, error) { return t, nil }

func (t *chanTarget) publish(ctx context.Context, payloads [][]byte) error {
	for _, pl := range payloads {
		p := make([]byte, len(pl))
		copy(p, pl)
		select {
		case t.ch <- p:
		default:
			select {
			case t.ch <- p:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (t *chanTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	c := &chanConsumer{t: t, stopped: make(chan struct{})}
	t.wg.Go(func() {
		for {
			select { // the common case, without the stop channels
			case p := <-t.ch:
				h(p)
				continue
			default:
			}
			select {
			case p := <-t.ch:
				h(p)
			case <-c.stopped:
				return
			case <-t.quit:
				return
			}
		}
	})
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
