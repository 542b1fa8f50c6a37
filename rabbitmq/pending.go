package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.PendingLister = (*Subscription)(nil)

// errOtherConsumer is PendingDeliveries' error while a member elsewhere
// still has a consumer on the group's queue.
var errOtherConsumer = errors.New("a member of another process still consumes from the group's queue")

// PendingDeliveries implements backend.PendingLister. A member of a
// key-ordered group holds deliveries only on its live channel: the
// broker puts what a channel held unsettled back at the head of the
// queue, in delivery order, when the channel closes or its connection
// dies (a killed process at once, a silent network after two missed
// heartbeats), and a holder's backend closes its channels when its group
// lock lapses, before the lock is free (see Key order in the package
// doc). So the list is the deliveries the members of this backend hold
// on the group's queue, and it is complete once the queue has no other
// consumer: what a member elsewhere held is back at the head of the queue
// and is handed out, in order, before anything after it. While another
// consumer remains (a member whose connection the broker has not found
// dead yet), it returns an error that the bus asks again for every round.
//
// Deliveries waiting in a hold queue (a Nack with a delay, a Snooze) are
// not listed: they come back at the tail of the group's queue.
func (s *Subscription) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("rabbitmq: pending deliveries of %q: %w: max %d", s.queue, backend.ErrInvalidOption, max)
	}
	ps, local := s.b.localPending(s.queue)
	consumers, err := s.b.consumerCount(ctx, s.queue)
	if err != nil {
		return nil, false, fmt.Errorf("rabbitmq: pending deliveries of %q: %w", s.queue, err)
	}
	if consumers > local {
		return nil, false, fmt.Errorf("rabbitmq: pending deliveries of %q: %w (%d consumers, %d of this process)", s.queue, errOtherConsumer, consumers, local)
	}
	if len(ps) > max {
		return ps[:max], false, nil
	}
	return ps, true, nil
}

// localPending returns the deliveries the subscriptions of this backend
// hold unsettled on queue q, in delivery order per channel, and how many
// of them consume from q now.
func (b *Backend) localPending(q string) ([]backend.Pending, int) {
	b.mu.Lock()
	var subs []*Subscription
	for s := range b.subs {
		if s.queue == q {
			subs = append(subs, s)
		}
	}
	b.mu.Unlock()
	var ps []backend.Pending
	consuming := 0
	for _, s := range subs {
		s.mu.Lock()
		if s.ch != nil {
			consuming++
		}
		var held []*delivery
		for d := range s.active {
			if d.state == stActive || d.state == stReleased {
				held = append(held, d)
			}
		}
		s.mu.Unlock()
		sortByTag(held)
		for _, d := range held {
			ps = append(ps, backend.Pending{ID: d.msg.ID, Key: d.msg.Key, LeaseEnd: d.expires})
		}
	}
	return ps, consuming
}

// sortByTag sorts ds by channel generation and delivery tag: the order
// the broker handed them out.
func sortByTag(ds []*delivery) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && (ds[j].gen < ds[j-1].gen || ds[j].gen == ds[j-1].gen && ds[j].tag < ds[j-1].tag); j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}

// consumerCount asks the broker how many consumers queue q has (a
// passive declare); a queue that does not exist has none.
func (b *Backend) consumerCount(ctx context.Context, q string) (int, error) {
	var st amqp.Queue
	err := b.pub.use(ctx, func(ch *amqp.Channel) error {
		var err error
		st, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err
	})
	if isAMQPCode(err, amqp.NotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.Consumers, nil
}
