package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// amqpTarget is the baseline of amqp:// and amqps://: amqp091-go on an
// exchange and a quorum queue of its own, as the bus lays a topic and a
// group out. Each publisher writes its batch on a confirm-mode channel of
// its own, each message persistent and with an ID, and waits for every
// confirm; one consumer with a prefetch of max-in-flight acks each
// message after handling it.
type amqpTarget struct {
	r        *benchRun
	u        *url.URL
	conn     *amqp.Connection // publishers
	sub      *amqp.Connection // the consumer
	exchange string
	queue    string
}

// openAMQPTarget dials twice (publishing and consuming apart, as the bus
// does).
func openAMQPTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	cu := *u
	cu.RawQuery = ""
	dial := func() (*amqp.Connection, error) {
		c, err := amqp.DialConfig(cu.String(), amqp.Config{Dial: amqp.DefaultDial(10 * time.Second), Heartbeat: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("baseline: dial: %w", urlopt.RedactError(err, u))
		}
		return c, nil
	}
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	sub, err := dial()
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	t := &amqpTarget{r: r, u: u, conn: conn, sub: sub,
		exchange: fmt.Sprintf("bus-bench-raw-%x", r.nonce), queue: fmt.Sprintf("bus-bench-raw-%x-q", r.nonce)}
	return t, nil
}

// prepare declares the exchange and, but for the publish scenario, the
// queue bound to it: as on the bus, where the publish scenario has no
// group, so the broker routes its messages to no queue.
func (t *amqpTarget) prepare(_ context.Context, scenario string) error {
	queue := t.queue
	if scenario == scenarioPublish {
		queue = ""
	}
	if err := rawclient.AMQPDeclare(t.conn, t.exchange, queue); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}

func (t *amqpTarget) backend() string { return "rabbitmq" }

func (t *amqpTarget) client() string { return "amqp091-go" }

type amqpPublisher struct{ p *rawclient.AMQPPublisher }

func (t *amqpTarget) publisher(context.Context) (publisher, error) {
	p, err := rawclient.NewAMQPPublisher(t.conn, t.exchange)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return amqpPublisher{p}, nil
}

func (p amqpPublisher) publish(ctx context.Context, payloads [][]byte) error {
	if err := p.p.Publish(ctx, payloads); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}

func (t *amqpTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	c, err := rawclient.NewAMQPConsumer(t.sub, t.queue, t.r.cfg.MaxInFlight)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return startLoopConsumer(func(ctx context.Context) error { return c.Run(ctx, h) }), nil
}

// close deletes the queue and the exchange and closes the connections.
func (t *amqpTarget) close(context.Context) error {
	return errors.Join(rawclient.AMQPDelete(t.conn, t.exchange, t.queue), t.sub.Close(), t.conn.Close())
}
