package rawclient

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"
)

// NATSAsyncPublisher publishes one message per call with PublishMsgAsync,
// each with its own Nats-Msg-Id as the bus sends, and checks the acks as
// they come: the window of outstanding acks is the JetStream context's
// (jetstream.WithPublishAsyncMaxPending). Not safe for concurrent use.
type NATSAsyncPublisher struct {
	js      jetstream.JetStream
	subject string
	futures []jetstream.PubAckFuture // outstanding, oldest first from head
	head    int
	failed  int
	first   error
}

// NewNATSAsyncPublisher returns an asynchronous publisher to subject.
func NewNATSAsyncPublisher(js jetstream.JetStream, subject string) *NATSAsyncPublisher {
	return &NATSAsyncPublisher{js: js, subject: subject}
}

// Publish sends payload and returns once the client took it (it waits
// while the window is full); the payload may be reused then.
func (p *NATSAsyncPublisher) Publish(payload []byte) error {
	m := &natsgo.Msg{Subject: p.subject, Data: payload, Header: natsgo.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
	f, err := p.js.PublishMsgAsync(m)
	for errors.Is(err, jetstream.ErrTooManyStalledMsgs) && p.head < len(p.futures) {
		// The window stayed full: wait for the oldest ack, then retry.
		p.await(p.futures[p.head])
		p.futures[p.head] = nil
		p.head++
		f, err = p.js.PublishMsgAsync(m)
	}
	if err != nil {
		return err
	}
	p.futures = append(p.futures, f)
	p.reap()
	return nil
}

// reap counts the acks already in, oldest first.
func (p *NATSAsyncPublisher) reap() {
	for p.head < len(p.futures) {
		f := p.futures[p.head]
		select {
		case <-f.Ok():
		case err := <-f.Err():
			p.fail(err)
		default:
			p.compact()
			return
		}
		p.futures[p.head] = nil
		p.head++
	}
	p.compact()
}

func (p *NATSAsyncPublisher) compact() {
	if p.head > 0 && p.head >= len(p.futures)/2 {
		n := copy(p.futures, p.futures[p.head:])
		clear(p.futures[n:])
		p.futures = p.futures[:n]
		p.head = 0
	}
}

// await waits for f's answer.
func (p *NATSAsyncPublisher) await(f jetstream.PubAckFuture) {
	select {
	case <-f.Ok():
	case err := <-f.Err():
		p.fail(err)
	}
}

func (p *NATSAsyncPublisher) fail(err error) {
	p.failed++
	if p.first == nil {
		p.first = err
	}
}

// Flush waits for every outstanding ack and returns how many messages
// failed since the publisher was made, with the first error.
func (p *NATSAsyncPublisher) Flush(ctx context.Context) (int, error) {
	for ; p.head < len(p.futures); p.head++ {
		f := p.futures[p.head]
		select {
		case <-f.Ok():
		case err := <-f.Err():
			p.fail(err)
		case <-ctx.Done():
			return p.failed + len(p.futures) - p.head, ctx.Err()
		}
	}
	p.futures, p.head = p.futures[:0], 0
	if p.failed > 0 {
		return p.failed, fmt.Errorf("%d messages failed, first: %w", p.failed, p.first)
	}
	return 0, nil
}

// RedisPipelinePublisher adds one entry per call to a pipeline of XADDs
// and sends it, waiting for the replies, when it holds depth commands.
// Not safe for concurrent use.
type RedisPipelinePublisher struct {
	key    string
	pipe   redis.Pipeliner
	depth  int
	n      int
	failed int
	first  error
}

// NewRedisPipelinePublisher returns a publisher to the stream key with a
// pipeline of depth commands.
func NewRedisPipelinePublisher(rc redis.UniversalClient, key string, depth int) *RedisPipelinePublisher {
	return &RedisPipelinePublisher{key: key, pipe: rc.Pipeline(), depth: depth}
}

// Publish queues an XADD of payload (a copy: the pipeline keeps its
// arguments until it is sent), and sends the pipeline when it is full.
func (p *RedisPipelinePublisher) Publish(ctx context.Context, payload []byte) error {
	p.pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.key, Values: []any{RedisIDField, nuid.Next(), RedisPayloadField, append([]byte(nil), payload...)}})
	if p.n++; p.n >= p.depth {
		return p.exec(ctx)
	}
	return nil
}

func (p *RedisPipelinePublisher) exec(ctx context.Context) error {
	n := p.n
	p.n = 0
	cmds, err := p.pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	failed := 0
	for _, c := range cmds {
		if c.Err() != nil {
			failed++
		}
	}
	if len(cmds) == 0 {
		failed = n
	}
	p.failed += failed
	if p.first == nil {
		p.first = err
	}
	return err
}

// Flush sends what the pipeline holds and returns how many messages
// failed since the publisher was made, with the first error.
func (p *RedisPipelinePublisher) Flush(ctx context.Context) (int, error) {
	if p.n > 0 {
		_ = p.exec(ctx)
	}
	if p.failed > 0 {
		return p.failed, fmt.Errorf("%d messages failed, first: %w", p.failed, p.first)
	}
	return 0, nil
}
