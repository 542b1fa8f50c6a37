package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
	seq      atomic.Uint64
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
	ch, err := t.conn.Channel()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(t.exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("baseline: declare %s: %w", t.exchange, err)
	}
	if scenario == scenarioPublish {
		return nil
	}
	if _, err := ch.QueueDeclare(t.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("baseline: declare %s: %w", t.queue, err)
	}
	if err := ch.QueueBind(t.queue, "", t.exchange, false, nil); err != nil {
		return fmt.Errorf("baseline: bind %s: %w", t.queue, err)
	}
	return nil
}

func (t *amqpTarget) backend() string { return "rabbitmq" }

func (t *amqpTarget) client() string { return "amqp091-go" }

type amqpPublisher struct {
	t  *amqpTarget
	ch *amqp.Channel
}

func (t *amqpTarget) publisher(context.Context) (publisher, error) {
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("baseline: confirm mode: %w", err)
	}
	return amqpPublisher{t: t, ch: ch}, nil
}

func (p amqpPublisher) publish(ctx context.Context, payloads [][]byte) error {
	confs := make([]*amqp.DeferredConfirmation, len(payloads))
	for i, pl := range payloads {
		c, err := p.ch.PublishWithDeferredConfirm(p.t.exchange, "", false, false, amqp.Publishing{
			MessageId:    strconv.FormatUint(p.t.seq.Add(1), 36),
			DeliveryMode: amqp.Persistent,
			Body:         pl,
		})
		if err != nil {
			return fmt.Errorf("baseline: publish: %w", err)
		}
		confs[i] = c
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("baseline: confirm: %w", err)
		}
		if !ok {
			return errors.New("baseline: the broker nacked a message")
		}
	}
	return nil
}

func (t *amqpTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	ch, err := t.sub.Channel()
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if err := ch.Qos(max(t.r.cfg.MaxInFlight, 1), 0, false); err != nil {
		return nil, fmt.Errorf("baseline: qos: %w", err)
	}
	dels, err := ch.Consume(t.queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("baseline: consume: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &redisConsumer{cancel: cancel, exited: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(c.exited)
		defer ch.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case d, ok := <-dels:
				if !ok {
					c.failed = errors.New("baseline: the consumer's channel closed")
					close(c.ended)
					return
				}
				h(d.Body)
				if err := d.Ack(false); err != nil {
					c.failed = fmt.Errorf("baseline: ack: %w", err)
					close(c.ended)
					return
				}
			}
		}
	}()
	return c, nil
}

// close deletes the queue and the exchange and closes the connections.
func (t *amqpTarget) close(context.Context) error {
	var err error
	if ch, cerr := t.conn.Channel(); cerr == nil {
		_, qerr := ch.QueueDelete(t.queue, false, false, false)
		err = errors.Join(qerr, ch.ExchangeDelete(t.exchange, false, false))
		_ = ch.Close()
	}
	return errors.Join(err, t.sub.Close(), t.conn.Close())
}
