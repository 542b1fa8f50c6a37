package rawclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPDeclare declares a durable fanout exchange and, unless queue is
// empty, a quorum queue bound to it: a topic and a group as the bus lays
// them out on RabbitMQ.
func AMQPDeclare(conn *amqp.Connection, exchange, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", exchange, err)
	}
	if queue == "" {
		return nil
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		return fmt.Errorf("bind %s: %w", queue, err)
	}
	return nil
}

// AMQPDelete deletes what AMQPDeclare declared.
func AMQPDelete(conn *amqp.Connection, exchange, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var qerr error
	if queue != "" {
		_, qerr = ch.QueueDelete(queue, false, false, false)
	}
	return errors.Join(qerr, ch.ExchangeDelete(exchange, false, false))
}

// AMQPPublisher writes each batch on a confirm-mode channel of its own,
// each message persistent and with an ID of its own, and waits for every
// confirm. Not safe for concurrent use: each publishing goroutine has its
// own.
type AMQPPublisher struct {
	ch       *amqp.Channel
	exchange string
}

// NewAMQPPublisher opens a confirm-mode channel on conn for publishing to
// exchange.
func NewAMQPPublisher(conn *amqp.Connection, exchange string) (*AMQPPublisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, errors.Join(fmt.Errorf("confirm mode: %w", err), ch.Close())
	}
	return &AMQPPublisher{ch: ch, exchange: exchange}, nil
}

// Publish writes payloads and returns once the broker confirmed each.
func (p *AMQPPublisher) Publish(ctx context.Context, payloads [][]byte) error {
	confs := make([]*amqp.DeferredConfirmation, len(payloads))
	for i, pl := range payloads {
		c, err := p.ch.PublishWithDeferredConfirm(p.exchange, "", false, false, amqp.Publishing{
			MessageId: nuid.Next(), DeliveryMode: amqp.Persistent, Body: pl,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		confs[i] = c
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("confirm: %w", err)
		}
		if !ok {
			return errors.New("the broker nacked a message")
		}
	}
	return nil
}

// Close closes the publisher's channel.
func (p *AMQPPublisher) Close() error { return p.ch.Close() }

// AMQPConsumer consumes a queue on a channel of its own with a prefetch,
// acking each message after its handler.
type AMQPConsumer struct {
	ch   *amqp.Channel
	dels <-chan amqp.Delivery
}

// NewAMQPConsumer starts consuming queue on a new channel of conn with
// prefetch messages unacked at most.
func NewAMQPConsumer(conn *amqp.Connection, queue string, prefetch int) (*AMQPConsumer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(max(prefetch, 1), 0, false); err != nil {
		return nil, errors.Join(fmt.Errorf("qos: %w", err), ch.Close())
	}
	dels, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("consume: %w", err), ch.Close())
	}
	return &AMQPConsumer{ch: ch, dels: dels}, nil
}

// Run hands each body to h and acks it, until ctx ends (nil), the
// channel closes or an ack fails; it closes the channel when it returns.
func (c *AMQPConsumer) Run(ctx context.Context, h func([]byte)) error {
	defer c.ch.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-c.dels:
			if !ok {
				return errors.New("the consumer's channel closed")
			}
			h(d.Body)
			if err := d.Ack(false); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
	}
}
