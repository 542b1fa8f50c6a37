package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/urlopt"
	busnats "github.com/eventbus-go/bus/nats"
)

// natsTarget is the baseline of nats://, tls:// and nats+tls://: nats.go
// on a stream of its own. With JetStream each publisher sends its batch
// with PublishMsgAsync (each message with a Nats-Msg-Id, as the bus sends)
// and waits for the acks of that batch, the guarantee of bus.Publish
// returning nil; a durable pull consumer with explicit acks and
// MaxAckPending max-in-flight consumes, acking each message. With
// jetstream=false (core NATS) each publisher publishes its batch and
// flushes, and a plain subscription consumes.
type natsTarget struct {
	r       *benchRun
	u       *url.URL
	be      *busnats.Backend // opened from the URL only for its connection
	nc      *natsgo.Conn
	js      jetstream.JetStream
	core    bool
	storage jetstream.StorageType
	stream  string
	subject string
	durable string
	cons    jetstream.Consumer
}

// Pending limits of the raw core subscription, those of the bus's.
const (
	natsRawPendingMsgs  = 65536
	natsRawPendingBytes = 64 << 20
	natsRawTimeout      = 10 * time.Second
)

// openNATSTarget takes nats.go as the bus would dial it: the URL goes
// through the NATS backend's own parser (servers, credentials, nkey, TLS,
// jetstream and storage), and the raw side uses that backend's connection
// and nothing else of it.
func openNATSTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	be, err := busnats.Open(ctx, u, nil)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	caps := be.Capabilities()
	t := &natsTarget{
		r: r, u: u, be: be, core: caps.Name == "nats-core", storage: jetstream.MemoryStorage,
		stream:  rawName(fmt.Sprintf("BUS-BENCH-RAW_%x", r.nonce), r.topic),
		subject: rawName(fmt.Sprintf("bus-bench-raw.%x", r.nonce), r.topic),
		durable: rawName("raw", r.group()),
	}
	if caps.Persistent {
		t.storage = jetstream.FileStorage
	}
	nc := be.Conn()
	t.nc = nc
	if !t.core {
		window := max(4000, r.cfg.Batch*r.cfg.Publishers)
		if r.cfg.AsyncWindow > 0 {
			window = r.cfg.AsyncWindow
		}
		if t.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window)); err != nil {
			_ = be.Close()
			return nil, fmt.Errorf("baseline: jetstream: %w", err)
		}
	}
	return t, nil
}

func (t *natsTarget) backend() string { return "nats" }

func (t *natsTarget) client() string {
	if t.core {
		return "nats.go core"
	}
	return "nats.go jetstream"
}

func (t *natsTarget) prepare(ctx context.Context, scenario string) error {
	if t.core {
		if scenario == scenarioConsume {
			return errors.New("the consume scenario needs a backlog; core NATS keeps none (use --scenario e2e)")
		}
		return nil
	}
	_, err := t.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: t.stream, Subjects: []string{t.subject}, Storage: t.storage,
		Retention: jetstream.LimitsPolicy, MaxMsgs: -1, MaxBytes: -1,
	})
	if err != nil {
		return fmt.Errorf("baseline: create stream: %w", urlopt.RedactError(err, t.u))
	}
	if scenario == scenarioPublish {
		return nil
	}
	t.cons, err = t.js.CreateOrUpdateConsumer(ctx, t.stream, jetstream.ConsumerConfig{
		Durable: t.durable, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: t.r.cfg.MaxInFlight,
	})
	if err != nil {
		return fmt.Errorf("baseline: create consumer: %w", urlopt.RedactError(err, t.u))
	}
	return nil
}

type natsPublisher struct {
	t *natsTarget
	p *rawclient.NATSPublisher
}

func (t *natsTarget) publisher(context.Context) (publisher, error) {
	if t.r.cfg.AsyncWindow > 0 && !t.core {
		return natsAsyncPublisher{rawclient.NewNATSAsyncPublisher(t.js, t.subject)}, nil
	}
	return &natsPublisher{t: t, p: rawclient.NewNATSPublisher(t.js, t.subject, t.r.cfg.Batch)}, nil
}

func (p *natsPublisher) publish(ctx context.Context, payloads [][]byte) error {
	t := p.t
	if t.core {
		fctx, cancel := context.WithTimeout(ctx, natsRawTimeout)
		defer cancel()
		return rawclient.NATSCorePublish(fctx, t.nc, t.subject, payloads)
	}
	return p.p.Publish(ctx, payloads)
}

type natsConsumer struct {
	cc  jetstream.ConsumeContext
	sub *natsgo.Subscription
	nc  *natsgo.Conn
}

func (t *natsTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	c := &natsConsumer{nc: t.nc}
	if t.core {
		sub, err := t.nc.Subscribe(t.subject, func(m *natsgo.Msg) { h(m.Data) })
		if err != nil {
			return nil, fmt.Errorf("baseline: subscribe: %w", err)
		}
		if err := sub.SetPendingLimits(natsRawPendingMsgs, natsRawPendingBytes); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("baseline: subscribe: %w", err)
		}
		// The server knows the subscription before the first publish.
		if err := t.nc.Flush(); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("baseline: subscribe: %w", err)
		}
		c.sub = sub
		return c, nil
	}
	cc, err := rawclient.NATSConsume(t.cons, t.r.cfg.MaxInFlight, h, func(err error) {
		t.r.note("baseline: ack: " + err.Error())
	})
	if err != nil {
		return nil, fmt.Errorf("baseline: consume: %w", err)
	}
	c.cc = cc
	return c, nil
}

// done is never closed: the raw consumers report errors as they go.
func (c *natsConsumer) done() <-chan struct{} { return nil }

// stop ends the consumer and flushes the acks it sent.
func (c *natsConsumer) stop(ctx context.Context) error {
	if c.sub != nil {
		return c.sub.Unsubscribe()
	}
	c.cc.Stop()
	select {
	case <-c.cc.Closed():
	case <-ctx.Done():
		return fmt.Errorf("baseline: stop the consumer: %w", ctx.Err())
	}
	return c.nc.FlushWithContext(ctx)
}

func (c *natsConsumer) err() error { return nil }

// close deletes the stream and closes the connection.
func (t *natsTarget) close(ctx context.Context) error {
	var err error
	if !t.core {
		if derr := t.js.DeleteStream(ctx, t.stream); derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
			err = fmt.Errorf("baseline: delete stream %s: %w", t.stream, urlopt.RedactError(derr, t.u))
		}
	}
	return errors.Join(err, t.be.Close())
}
