package bustest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/recorder"
	"github.com/eventbus-go/bus/observer"
)

// Result is what the bus did with a message after its handler ran: the
// decision a subscription with the same options would make.
type Result struct {
	// Called is false when the bus did not run the handler (the attempt
	// was past the max deliveries, for example).
	Called bool
	// Err is what the handler returned; a panic is an error here, as the
	// bus sees it.
	Err error
	// Outcome is the settlement: ack; nack (a redelivery after Delay);
	// dead_letter (Code and Reason say why); dropped (dead-lettering off);
	// pending (an AckManual handler that settled nothing: the message
	// comes back after its lease).
	Outcome bus.Outcome
	// Delay is the delay of the redelivery the bus asked for, when
	// Outcome is a nack (a snooze included).
	Delay time.Duration
	// Snoozed: the nack is a snooze (bus.Snooze, Delivery.Snooze), which
	// does not count an attempt.
	Snoozed bool
	// Code and Reason say why the message was dead-lettered or dropped.
	Code   bus.DeadLetterCode
	Reason string
	// DeadLetter is the copy stored on the dead-letter topic (with its
	// bus-dlq-* headers), or nil.
	DeadLetter *bus.Message
}

// String describes the result for test failure messages.
func (r Result) String() string {
	switch r.Outcome {
	case bus.OutcomeNacked:
		if r.Snoozed {
			return fmt.Sprintf("snoozed for %v", r.Delay)
		}
		return fmt.Sprintf("nacked for %v (handler error: %v)", r.Delay, r.Err)
	case bus.OutcomeDeadLettered, bus.OutcomeDropped:
		return fmt.Sprintf("%s with code %s: %s", r.Outcome, r.Code, r.Reason)
	}
	return fmt.Sprintf("%s (handler error: %v)", r.Outcome, r.Err)
}

// Run delivers msg to h the way a subscription with the options given by
// Subscribe would (AckOnSuccess by default), on a private bus whose
// backend records what the bus asks of it, and reports the bus's
// decision: ack, retry after which delay, or dead-letter with which code.
// WithAttempt sets which delivery of the message it is, so that the max
// deliveries decision can be tested. msg is copied. Run fails the test
// when msg or the options are invalid, or when the bus has not decided
// within ten seconds.
func Run(t T, h bus.Handler, msg *bus.Message, opts ...Option) Result {
	t.Helper()
	cfg := config{topic: "test", group: "default", attempt: 1, publishedAt: time.Now()}
	for _, o := range opts {
		o(&cfg)
	}
	if msg == nil || h == nil || cfg.attempt < 1 {
		t.Fatalf("bustest: Run wants a message, a handler and an attempt >= 1")
		return Result{}
	}
	rec := recorder.New(cfg.publishedAt, cfg.attempt)
	b := bus.New(rec, bus.WithObserver(observer.Nop()))
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	defer func() {
		if err := b.Close(ctx); err != nil {
			t.Errorf("bustest: close the private bus: %v", err)
		}
	}()
	res, err := run(ctx, b, rec, cfg, h, msg)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	return res
}

// handled is what the handler wrapper saw: the delivery, the handler's
// error, and a channel closed once the delivery is settled.
type handled struct {
	d       *bus.Delivery
	err     error
	settled <-chan struct{}
}

func run(ctx context.Context, b *bus.Bus, rec *recorder.Backend, cfg config, h bus.Handler, msg *bus.Message) (Result, error) {
	if err := b.Publish(ctx, cfg.topic, msg); err != nil {
		return Result{}, err
	}
	calls := make(chan handled, 1)
	wrapped := func(ctx context.Context, d *bus.Delivery) (err error) {
		settled := make(chan struct{})
		d.OnSettle(func(bus.Outcome, error) { close(settled) })
		defer func() {
			if p := recover(); p != nil {
				calls <- handled{d, fmt.Errorf("handler panic: %v", p), settled}
				panic(p) // the bus recovers it, as it would in production
			}
			calls <- handled{d, err, settled}
		}()
		return h(ctx, d)
	}
	subOpts := append([]bus.SubscribeOption{bus.WithGroup(cfg.group), bus.WithAckTimeout(time.Hour), bus.WithAckMode(cfg.ackMode)}, cfg.subOpts...)
	if cfg.noDLQ {
		subOpts = append(subOpts, bus.WithDeadLetter(""))
	}
	if _, err := b.Subscribe(ctx, cfg.topic, wrapped, subOpts...); err != nil {
		return Result{}, fmt.Errorf("subscribe: %w", err)
	}
	return await(ctx, rec, cfg.ackMode, calls)
}

// await waits for the bus's decision. In AckManual it is made when the
// handler returns (what it settled, or nothing); otherwise it is the
// settlement the bus makes after the handler returned (AckOnSuccess),
// before it ran (AckOnReceive), or without running it (the backend saw a
// settlement and the handler never ran).
func await(ctx context.Context, rec *recorder.Backend, mode bus.AckMode, calls <-chan handled) (Result, error) {
	timeout := errors.New("the bus did not settle the message within " + setupTimeout.String())
	var c handled
	select {
	case c = <-calls:
	case <-rec.Settled():
		if mode == bus.AckOnReceive {
			select {
			case c = <-calls:
			case <-ctx.Done():
				return Result{}, timeout
			}
			break
		}
		select {
		case c = <-calls: // it ran, and returned before the settlement
		default:
			return result(rec, Result{}, nil), nil // refused: never ran
		}
	case <-ctx.Done():
		return Result{}, timeout
	}
	res := Result{Called: true, Err: c.err}
	if mode == bus.AckManual {
		res = result(rec, res, c.d)
		if res.Outcome == bus.OutcomePending {
			// Decided: hand it back, so the private bus closes without
			// waiting for the lease.
			_ = c.d.Nack(ctx, 0)
		}
		return res, nil
	}
	select {
	case <-c.settled:
		return result(rec, res, c.d), nil
	case <-ctx.Done():
		return res, timeout
	}
}

// result fills res with the settlement: the delivery's own outcome and
// code when the handler ran (it tells a drop from an ack), and what the
// backend recorded.
func result(rec *recorder.Backend, res Result, d *bus.Delivery) Result {
	r := rec.Record()
	res.Outcome = bus.OutcomeAcked
	switch {
	case d != nil:
		res.Outcome, res.Code = d.Outcome(), d.DeadLetterCode()
	case r.DeadLettered:
		res.Outcome = bus.OutcomeDeadLettered
	case r.Nacked:
		res.Outcome = bus.OutcomeNacked
	}
	if res.Outcome == bus.OutcomeNacked {
		res.Delay, res.Snoozed = r.NackDelay, r.Snoozed
	}
	if r.DeadLettered {
		res.Code, res.Reason, res.DeadLetter = r.Code, r.Reason, r.Dead
	}
	return res
}
