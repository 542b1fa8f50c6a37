package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/eventbus-go/bus/internal/urlopt"
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
	nc      *natsgo.Conn
	js      jetstream.JetStream
	core    bool
	storage jetstream.StorageType
	stream  string
	subject string
	cons    jetstream.Consumer
}

// Pending limits of the raw core subscription, those of the bus's.
const (
	natsRawPendingMsgs  = 65536
	natsRawPendingBytes = 64 << 20
	natsRawTimeout      = 10 * time.Second
)

// openNATSTarget connects nats.go to the servers and credentials of the
// URL, with its jetstream, storage, creds, nkey and TLS file parameters;
// the bus's other parameters do not concern the raw client.
func openNATSTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	q := u.Query()
	t := &natsTarget{
		r: r, u: u, storage: jetstream.FileStorage,
		stream:  fmt.Sprintf("BUS-BENCH-RAW_%x", r.nonce),
		subject: fmt.Sprintf("bus-bench-raw.%x", r.nonce),
	}
	if v := q.Get("jetstream"); v != "" {
		js, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("baseline: jetstream=%q: want true or false", v)
		}
		t.core = !js
	}
	if q.Get("storage") == "memory" {
		t.storage = jetstream.MemoryStorage
	}
	opts := []natsgo.Option{natsgo.Name("bus bench baseline"), natsgo.Timeout(natsRawTimeout)}
	if v := q.Get("creds"); v != "" {
		opts = append(opts, natsgo.UserCredentials(v))
	}
	if v := q.Get("nkey"); v != "" {
		o, err := natsgo.NkeyOptionFromSeed(v)
		if err != nil {
			return nil, fmt.Errorf("baseline: nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if v := q.Get("tls_ca"); v != "" {
		opts = append(opts, natsgo.RootCAs(v))
	}
	if c, k := q.Get("tls_cert"), q.Get("tls_key"); c != "" || k != "" {
		opts = append(opts, natsgo.ClientCert(c, k))
	}
	server := *u
	server.RawQuery, server.Fragment, server.RawFragment, server.Path, server.RawPath = "", "", "", "", ""
	if server.Scheme != "nats" {
		server.Scheme = "tls"
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := natsgo.Connect(server.String(), opts...)
	if err != nil {
		return nil, fmt.Errorf("baseline: connect: %w", urlopt.RedactError(err, u))
	}
	t.nc = nc
	if !t.core {
		window := max(4000, r.cfg.Batch*r.cfg.Publishers)
		if t.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window)); err != nil {
			nc.Close()
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
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: t.r.cfg.MaxInFlight,
	})
	if err != nil {
		return fmt.Errorf("baseline: create consumer: %w", urlopt.RedactError(err, t.u))
	}
	return nil
}

type natsPublisher struct {
	t       *natsTarget
	futures []jetstream.PubAckFuture
}

func (t *natsTarget) publisher(context.Context) (publisher, error) {
	return &natsPublisher{t: t, futures: make([]jetstream.PubAckFuture, 0, t.r.cfg.Batch)}, nil
}

func (p *natsPublisher) publish(ctx context.Context, payloads [][]byte) error {
	t := p.t
	if t.core {
		for _, pl := range payloads {
			if err := t.nc.Publish(t.subject, pl); err != nil {
				return err
			}
		}
		fctx, cancel := context.WithTimeout(ctx, natsRawTimeout)
		defer cancel()
		return t.nc.FlushWithContext(fctx)
	}
	p.futures = p.futures[:0]
	var err error
	for _, pl := range payloads {
		m := &natsgo.Msg{Subject: t.subject, Data: pl, Header: natsgo.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
		f, perr := t.js.PublishMsgAsync(m)
		if perr != nil {
			err = perr
			break
		}
		p.futures = append(p.futures, f)
	}
	// Wait for every message sent, even after a failure: its payload
	// buffer is reused by the next batch.
	for _, f := range p.futures {
		select {
		case <-f.Ok():
		case ferr := <-f.Err():
			err = cmpErr(err, ferr)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
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
	cc, err := t.cons.Consume(func(m jetstream.Msg) {
		h(m.Data())
		if err := m.Ack(); err != nil {
			t.r.note("baseline: ack: " + err.Error())
		}
	}, jetstream.PullMaxMessages(t.r.cfg.MaxInFlight))
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
	defer t.nc.Close()
	if t.core {
		return nil
	}
	if err := t.js.DeleteStream(ctx, t.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("baseline: delete stream %s: %w", t.stream, urlopt.RedactError(err, t.u))
	}
	return nil
}
