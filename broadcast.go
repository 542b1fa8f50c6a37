package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/shutdown"
	"github.com/eventbus-go/bus/observer"
)

// broadcastPrefix begins the name of every broadcast subscription's
// group; WithGroup refuses it.
const broadcastPrefix = "_broadcast."

// Bounds of WithBroadcastExpiry.
const (
	defaultBroadcastExpiry = 30 * time.Second
	minBroadcastExpiry     = time.Second
	maxBroadcastExpiry     = 24 * time.Hour
)

// broadcastDeleteTimeout bounds the deletion of a broadcast group when
// its subscription closes (within the Close ctx as well).
const broadcastDeleteTimeout = 5 * time.Second

// WithBroadcast makes the subscription a broadcast one: it gets every
// message published to the topic after Subscribe returned, whatever
// other subscriptions of the topic, in this process or any other, do.
// The bus gives it a consumer group of its own, named "_broadcast."
// followed by a unique ID (Subscription.Group), created at the newest
// message, which no other subscription joins.
//
// The group lives only as long as the subscription: Close deletes it at
// the broker. While the subscription runs, the bus renews a lease on the
// group (the backend's group lock) about every sixth of the expiry (see
// WithBroadcastExpiry, default 30s); a process that dies stops renewing
// it, and once the lease has lapsed any other broadcast subscription of
// the topic deletes the group, within half its own expiry (each sweeps
// when it starts and every half expiry). A dead process's group is
// therefore gone within 1.5 times the expiry after it died (its expiry
// plus half the sweeping subscription's, when they differ), while a
// broadcast subscription of the topic runs anywhere (or at the next
// broadcast Subscribe to the topic). A subscription that cannot
// renew its lease for half the expiry (the broker is unreachable) ends,
// with an error wrapping ErrLeaseLost in Err, since its group may have
// been deleted: subscribe again.
//
// Everything else works as on any subscription (ack modes, retries,
// dead letters, key ordering within the subscription, batches, typed
// topics); a retried message is retried for this subscription alone.
// WithGroup and WithStartFrom(StartOldest) contradict it and are
// refused. It needs Capabilities.Broadcast (mem, Redis, NATS JetStream,
// PostgreSQL, and RabbitMQ with its management API; core NATS
// subscriptions without a group already get every message, at most
// once); elsewhere Subscribe returns an error wrapping ErrUnsupported
// that says what the backend needs for it, where it can have it. A partitioned topic cannot be subscribed in
// broadcast. See docs/semantics.md, Broadcast subscriptions.
func WithBroadcast() SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		s.broadcast = true
		return nil
	})
}

// WithBroadcastExpiry sets how long a broadcast subscription's group
// (WithBroadcast) outlives a process that died without closing it: the
// lease the bus renews on the group lapses after d, and the group is
// deleted within d/2 more. 1s..24h, default 30s. A subscription that
// cannot renew for d/2 ends (see WithBroadcast). Giving it without
// WithBroadcast is an error.
func WithBroadcastExpiry(d time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if d < minBroadcastExpiry || d > maxBroadcastExpiry {
			return fmt.Errorf("%w: broadcast expiry %v, want %v..%v", ErrInvalidOption, d, minBroadcastExpiry, maxBroadcastExpiry)
		}
		s.broadcastExpiry = d
		return nil
	})
}

// broadcastErrors lists what contradicts a broadcast subscription in o,
// or what the backend lacks for it, and names its group.
func (o *subscribeOptions) broadcastErrors(caps backend.Capabilities) []error {
	if !o.broadcast {
		if o.broadcastExpiry > 0 {
			return []error{fmt.Errorf("%w: WithBroadcastExpiry bounds a broadcast subscription's group; it needs WithBroadcast", ErrInvalidOption)}
		}
		return nil
	}
	var errs []error
	if o.groupSet {
		errs = append(errs, fmt.Errorf("%w: WithBroadcast gives the subscription a group of its own; drop WithGroup", ErrInvalidOption))
	}
	if o.startFrom == backend.StartOldest {
		errs = append(errs, fmt.Errorf("%w: a broadcast subscription gets the messages published after it subscribed; drop WithStartFrom(StartOldest)", ErrInvalidOption))
	}
	if !caps.Broadcast {
		err := fmt.Errorf("%w: %s cannot give a subscription a group that a process leaves behind it for no longer than its expiry (WithBroadcast)", ErrUnsupported, caps.Name)
		if caps.BroadcastNeeds != "" {
			err = fmt.Errorf("%w: it needs %s", err, caps.BroadcastNeeds)
		}
		errs = append(errs, err)
	}
	if o.broadcastExpiry == 0 {
		o.broadcastExpiry = defaultBroadcastExpiry
	}
	o.group = broadcastPrefix + msgid.New()
	return errs
}

// broadcastLease keeps a broadcast subscription's group alive and
// removes the groups of broadcast subscriptions that died. The lease is
// the backend's group lock on the subscription's own group, taken before
// the group is made (takeBroadcastLease), so a group that exists is
// either leased or left by a subscription that stopped renewing it. The
// lease is renewed every sixth of the expiry; every half expiry, and at
// once when it starts, the subscription deletes the topic's broadcast
// groups whose lease lapsed (sweep). Closing it deletes its own group.
type broadcastLease struct {
	s            *consumer
	topic, group string
	locker       backend.GroupLocker
	deleter      backend.GroupDeleter
	inspect      backend.Inspector
	holder       string
	ttl          time.Duration
	// heldAt is when the lease was last taken or renewed; only run reads
	// and writes it once it started.
	heldAt time.Time

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// takeBroadcastLease takes the lease on o's new group before the backend
// makes the group.
func (b *Bus) takeBroadcastLease(ctx context.Context, topic string, o subscribeOptions) (*broadcastLease, error) {
	l := &broadcastLease{topic: topic, group: o.group, holder: msgid.New(), ttl: o.broadcastExpiry,
		stop: make(chan struct{}), done: make(chan struct{})}
	var ok bool
	if l.locker, ok = b.be.(backend.GroupLocker); !ok {
		return nil, fmt.Errorf("%w: %s has no group lock for a broadcast group", ErrUnsupported, b.caps.Name)
	}
	if l.deleter, ok = b.be.(backend.GroupDeleter); !ok {
		return nil, fmt.Errorf("%w: %s cannot delete a broadcast group", ErrUnsupported, b.caps.Name)
	}
	if l.inspect, ok = b.be.(backend.Inspector); !ok {
		return nil, fmt.Errorf("%w: %s cannot list the broadcast groups to sweep", ErrUnsupported, b.caps.Name)
	}
	held, _, err := l.locker.LockGroup(ctx, l.topic, l.group, l.holder, l.ttl)
	if err != nil {
		return nil, fmt.Errorf("lease the broadcast group: %w", err)
	}
	if !held {
		return nil, fmt.Errorf("lease the broadcast group %q: another holder has it", l.group)
	}
	l.heldAt = time.Now()
	return l, nil
}

// renewEvery is how often the lease is renewed, and how long a renewal
// may take.
func (l *broadcastLease) renewEvery() time.Duration { return l.ttl / 6 }

// sweepTimeout bounds one sweep: a third of the expiry, so that a sweep
// and the renewal after it end within half the expiry of the last
// renewal.
func (l *broadcastLease) sweepTimeout() time.Duration { return l.ttl / 3 }

// run renews the lease and sweeps until close, or until the lease is
// lost: the subscription then ends with the reason.
func (l *broadcastLease) run() {
	defer close(l.done)
	t := time.NewTicker(l.renewEvery())
	defer t.Stop()
	var nextSweep time.Time
	for {
		if now := time.Now(); !now.Before(nextSweep) {
			l.sweep()
			nextSweep = now.Add(l.ttl / 2)
		}
		select {
		case <-t.C:
		case <-l.stop:
			return
		}
		if err := l.renew(); err != nil {
			l.s.fail(err)
			return
		}
	}
}

// renew renews the lease once. It returns an error when the lease is
// lost: another holder has it, or it could not be renewed for half the
// expiry, after which another subscription may have deleted the group.
func (l *broadcastLease) renew() error {
	cfg := l.s.cfg
	ctx, cancel := context.WithTimeout(context.Background(), l.renewEvery())
	held, takeover, err := l.locker.LockGroup(ctx, cfg.Topic, cfg.Group, l.holder, l.ttl)
	cancel()
	now := time.Now()
	switch {
	case err == nil && held && !takeover:
		l.heldAt = now
		return nil
	case err == nil:
		return fmt.Errorf("bus: broadcast subscription %q: its group %q was taken over after its lease lapsed, and may have been deleted: subscribe again: %w", cfg.Topic, cfg.Group, ErrLeaseLost)
	}
	err = fmt.Errorf("bus: broadcast subscription %q: renew the lease of its group: %w", cfg.Topic, err)
	cfg.Health.lockFailed(err)
	l.s.observe(observer.Event{Scope: observer.ScopeLease, Topic: cfg.Topic, Group: cfg.Group, Err: err})
	if since := now.Sub(l.heldAt); since > l.ttl/2 {
		return fmt.Errorf("bus: broadcast subscription %q: the lease of its group %q was not renewed for %v, and the group may have been deleted: subscribe again: %w",
			cfg.Topic, cfg.Group, since.Round(time.Millisecond), errors.Join(ErrLeaseLost, err))
	}
	return nil
}

// sweep deletes the topic's broadcast groups whose lease lapsed: their
// subscription died without closing them. It takes each such group's
// lease first, so a live subscription's group is never deleted.
func (l *broadcastLease) sweep() {
	cfg := l.s.cfg
	ctx, cancel := context.WithTimeout(context.Background(), l.sweepTimeout())
	defer cancel()
	groups, err := l.inspect.Groups(ctx, cfg.Topic)
	for _, g := range groups {
		if err != nil {
			break
		}
		if !strings.HasPrefix(g.Name, broadcastPrefix) || g.Name == cfg.Group {
			continue
		}
		var held bool
		if held, _, err = l.locker.LockGroup(ctx, cfg.Topic, g.Name, l.holder, l.ttl); err != nil || !held {
			continue
		}
		if err = l.deleter.DeleteGroup(ctx, cfg.Topic, g.Name); err != nil {
			// Free it for the next sweep, here or elsewhere.
			_ = l.locker.UnlockGroup(ctx, cfg.Topic, g.Name, l.holder)
		}
	}
	if err != nil {
		l.s.observe(observer.Event{Scope: observer.ScopeReclaim, Topic: cfg.Topic, Group: cfg.Group,
			Err: fmt.Errorf("bus: broadcast subscription %q: delete the groups other broadcast subscriptions left: %w", cfg.Topic, err)})
	}
}

// close stops renewing, once the backend's subscription has closed, and
// deletes the group within hard and broadcastDeleteTimeout.
func (l *broadcastLease) close(hard context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	shutdown.WaitOrDone(hard, l.done)
	ctx, cancel := context.WithTimeout(hard, broadcastDeleteTimeout)
	defer cancel()
	return l.remove(ctx)
}

// remove deletes the group, and with it the lease.
func (l *broadcastLease) remove(ctx context.Context) error {
	if err := l.deleter.DeleteGroup(ctx, l.topic, l.group); err != nil {
		return fmt.Errorf("delete the broadcast group %q (it goes once its lease lapses): %w", l.group, err)
	}
	return nil
}

// discard deletes the group of a subscription that never ran, within
// broadcastDeleteTimeout.
func (l *broadcastLease) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), broadcastDeleteTimeout)
	defer cancel()
	_ = l.remove(ctx)
}
