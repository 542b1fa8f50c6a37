package rawclient

import (
	"context"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// NATSPublisher publishes each batch with PublishMsgAsync, every message
// with its own Nats-Msg-Id as the bus sends, and waits for the batch's
// acks. Not safe for concurrent use: each publishing goroutine has its
// own.
type NATSPublisher struct {
	js      jetstream.JetStream
	subject string
	futures []jetstream.PubAckFuture
}

// NewNATSPublisher returns a publisher to subject.
func NewNATSPublisher(js jetstream.JetStream, subject string, batch int) *NATSPublisher {
	return &NATSPublisher{js: js, subject: subject, futures: make([]jetstream.PubAckFuture, 0, batch)}
}

// Publish sends payloads and returns once the server acked each of them,
// with the first error. It waits for every message sent, also after a
// failure: the caller may reuse the payloads once it returns.
func (p *NATSPublisher) Publish(ctx context.Context, payloads [][]byte) error {
	p.futures = p.futures[:0]
	var err error
	for _, pl := range payloads {
		m := &natsgo.Msg{Subject: p.subject, Data: pl, Header: natsgo.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
		f, perr := p.js.PublishMsgAsync(m)
		if perr != nil {
			err = perr
			break
		}
		p.futures = append(p.futures, f)
	}
	for _, f := range p.futures {
		select {
		case <-f.Ok():
		case ferr := <-f.Err():
			if err == nil {
				err = ferr
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// NATSConsume consumes with cons, up to maxInFlight messages pulled at
// once, passes each payload to h and acks it; ack errors go to onAckErr.
func NATSConsume(cons jetstream.Consumer, maxInFlight int, h func([]byte), onAckErr func(error)) (jetstream.ConsumeContext, error) {
	return cons.Consume(func(m jetstream.Msg) {
		h(m.Data())
		if err := m.Ack(); err != nil {
			onAckErr(err)
		}
	}, jetstream.PullMaxMessages(maxInFlight))
}

// NATSCorePublish publishes payloads on core NATS (at most once) and
// flushes, so that they reached the server when it returns.
func NATSCorePublish(ctx context.Context, nc *natsgo.Conn, subject string, payloads [][]byte) error {
	for _, pl := range payloads {
		if err := nc.Publish(subject, pl); err != nil {
			return err
		}
	}
	return nc.FlushWithContext(ctx)
}
