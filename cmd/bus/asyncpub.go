package main

import (
	"context"
	"fmt"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/rawclient"
)

// With --async-window each publisher of the publish scenario emits one
// message per call and confirms later: the bus with PublishAsync inside a
// window of that many messages, nats.go with PublishMsgAsync and the same
// window of outstanding acks, go-redis with a pipeline of that depth. A
// run counts a message as published once its confirmation arrived.

// flusher is a publisher that confirms later: flush waits for every
// confirmation and returns how many messages failed.
type flusher interface {
	flush(ctx context.Context) (failed int, err error)
}

// busAsyncPublisher publishes through bus.PublishAsync and checks the
// results as they come, oldest first.
type busAsyncPublisher struct {
	b       *bus.Bus
	topic   string
	pending []*bus.PublishResult
	head    int
	failed  int
	first   error
}

func (p *busAsyncPublisher) publish(ctx context.Context, payloads [][]byte) error {
	for _, pl := range payloads {
		r := p.b.PublishAsync(ctx, p.topic, &bus.Message{Payload: pl})
		p.pending = append(p.pending, r)
	}
	p.reap()
	return nil
}

// reap checks the results already known, oldest first.
func (p *busAsyncPublisher) reap() {
	for p.head < len(p.pending) {
		r := p.pending[p.head]
		select {
		case <-r.Done():
		default:
			p.compact()
			return
		}
		p.check(r.Get(context.Background()))
		p.pending[p.head] = nil
		p.head++
	}
	p.compact()
}

func (p *busAsyncPublisher) compact() {
	if p.head > 0 && p.head >= len(p.pending)/2 {
		n := copy(p.pending, p.pending[p.head:])
		clear(p.pending[n:])
		p.pending = p.pending[:n]
		p.head = 0
	}
}

func (p *busAsyncPublisher) check(err error) {
	if err != nil {
		p.failed++
		if p.first == nil {
			p.first = err
		}
	}
}

func (p *busAsyncPublisher) flush(ctx context.Context) (int, error) {
	if err := p.b.Flush(ctx); err != nil {
		return p.failed + len(p.pending) - p.head, err
	}
	for _, r := range p.pending[p.head:] {
		p.check(r.Get(ctx))
	}
	p.pending, p.head = p.pending[:0], 0
	if p.failed > 0 {
		return p.failed, fmt.Errorf("%d messages failed, first: %w", p.failed, p.first)
	}
	return 0, nil
}

// natsAsyncPublisher is nats.go's PublishMsgAsync, one message per call.
type natsAsyncPublisher struct{ p *rawclient.NATSAsyncPublisher }

func (p natsAsyncPublisher) publish(_ context.Context, payloads [][]byte) error {
	for _, pl := range payloads {
		if err := p.p.Publish(pl); err != nil {
			return err
		}
	}
	return nil
}

func (p natsAsyncPublisher) flush(ctx context.Context) (int, error) { return p.p.Flush(ctx) }

// redisPipelinePublisher is go-redis with a pipeline of --async-window
// XADDs, one message per call.
type redisPipelinePublisher struct {
	p *rawclient.RedisPipelinePublisher
}

func (p redisPipelinePublisher) publish(ctx context.Context, payloads [][]byte) error {
	for _, pl := range payloads {
		if err := p.p.Publish(ctx, pl); err != nil {
			return err
		}
	}
	return nil
}

func (p redisPipelinePublisher) flush(ctx context.Context) (int, error) { return p.p.Flush(ctx) }
