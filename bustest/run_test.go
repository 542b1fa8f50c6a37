package bustest_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
	_ "github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

var errBusy = errors.New("db busy")

func constant(d time.Duration) bus.SubscribeOption {
	return bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(d) })
}

// realDecision runs h on a real mem:// bus with opts until the bus settles
// the message's attempt-th delivery, and returns what it did: the outcome
// and dead-letter code of that delivery and the attempt of the next one.
func realDecision(t *testing.T, h bus.Handler, attempt int, opts ...bus.SubscribeOption) (bus.Outcome, bus.DeadLetterCode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	type decision struct {
		o    bus.Outcome
		code bus.DeadLetterCode
	}
	got := make(chan decision, 1)
	_, err = b.Subscribe(ctx, "real", func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == attempt {
			d.OnSettle(func(o bus.Outcome, _ error) { got <- decision{o, d.DeadLetterCode()} })
			return h(ctx, d)
		}
		return errBusy // earlier attempts fail, to reach the one under test
	}, append([]bus.SubscribeOption{constant(time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "real", &bus.Message{ID: "m"}))
	select {
	case d := <-got:
		return d.o, d.code
	case <-ctx.Done():
		t.Fatal("the real bus did not settle the delivery")
		return 0, ""
	}
}

// Run decides as a real subscription with the same options does.
func TestRunAgreesWithARealBus(t *testing.T) {
	ok := func(context.Context, *bus.Delivery) error { return nil }
	busy := func(context.Context, *bus.Delivery) error { return errBusy }
	bad := func(context.Context, *bus.Delivery) error { return bus.Reject(errors.New("malformed")) }
	tests := []struct {
		name     string
		h        bus.Handler
		attempt  int
		want     bus.Outcome
		wantCode bus.DeadLetterCode
	}{
		{"success acks", ok, 1, bus.OutcomeAcked, ""},
		{"an error retries", busy, 1, bus.OutcomeNacked, ""},
		{"an error on the last attempt dead-letters", busy, 3, bus.OutcomeDeadLettered, bus.CodeMaxDeliveries},
		{"a permanent error dead-letters at once", bad, 1, bus.OutcomeDeadLettered, bus.CodeRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []bus.SubscribeOption{bus.WithMaxDeliveries(3), constant(40 * time.Second)}
			res := bustest.Run(t, tt.h, &bus.Message{ID: "m"}, bustest.WithAttempt(tt.attempt), bustest.Subscribe(opts...))
			real, code := realDecision(t, tt.h, tt.attempt, bus.WithMaxDeliveries(3))
			assert.Equal(t, real, res.Outcome, "Run's outcome is the real bus's: %s", res)
			assert.Equal(t, tt.want, res.Outcome, "%s", res)
			assert.Equal(t, code, res.Code, "the dead-letter code is the real bus's")
			assert.Equal(t, tt.wantCode, res.Code)
			assert.True(t, res.Called, "the handler ran")
			if tt.want == bus.OutcomeNacked {
				assert.Equal(t, 40*time.Second, res.Delay, "the retry delay comes from the subscription's backoff")
				assert.ErrorIs(t, res.Err, errBusy, "the handler's error")
			}
		})
	}
}

func TestRunPastMaxDeliveriesDeadLettersWithoutTheHandler(t *testing.T) {
	called := false
	res := bustest.Run(t, func(context.Context, *bus.Delivery) error { called = true; return nil },
		&bus.Message{ID: "m"}, bustest.WithAttempt(4), bustest.Subscribe(bus.WithMaxDeliveries(3)))
	assert.False(t, called, "the handler does not run past max deliveries")
	assert.False(t, res.Called)
	assert.Equal(t, bus.OutcomeDeadLettered, res.Outcome, "%s", res)
	assert.Equal(t, bus.CodeMaxDeliveries, res.Code)
}

func TestRunInManualModeReportsWhatTheHandlerSettled(t *testing.T) {
	res := bustest.Run(t, func(context.Context, *bus.Delivery) error { return nil },
		&bus.Message{ID: "m"}, bustest.WithAckMode(bus.AckManual))
	assert.Equal(t, bus.OutcomePending, res.Outcome, "a manual handler that settles nothing leaves the message pending")
	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error { return d.Nack(ctx, 5*time.Second) },
		&bus.Message{ID: "m"}, bustest.WithAckMode(bus.AckManual))
	assert.Equal(t, bus.OutcomeNacked, res.Outcome)
	assert.Equal(t, 5*time.Second, res.Delay)
}

func TestRunReportsPanicsAndDrops(t *testing.T) {
	res := bustest.Run(t, func(context.Context, *bus.Delivery) error { panic("boom") },
		&bus.Message{ID: "m"}, bustest.Subscribe(constant(time.Second)))
	assert.Equal(t, bus.OutcomeNacked, res.Outcome, "a panic is retried like an error")
	assert.ErrorContains(t, res.Err, "boom")
	res = bustest.Run(t, func(context.Context, *bus.Delivery) error { return bus.Reject(errBusy) },
		&bus.Message{ID: "m"}, bustest.WithoutDeadLetter())
	assert.Equal(t, bus.OutcomeDropped, res.Outcome, "with dead-lettering off a permanent error drops the message")
	assert.Equal(t, bus.CodeRejected, res.Code)
}

// Run records a snooze, in its error form and from Delivery.Snooze in
// AckManual, apart from a counted retry.
func TestRunRecordsSnoozes(t *testing.T) {
	res := bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Snooze(time.Minute)
	}, &bus.Message{Payload: []byte("x")})
	assert.Equal(t, bus.OutcomeNacked, res.Outcome, res.String())
	assert.True(t, res.Snoozed, "a snooze, not a retry: %s", res)
	assert.Equal(t, time.Minute, res.Delay)

	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return d.Snooze(ctx, 3*time.Second)
	}, &bus.Message{Payload: []byte("x")}, bustest.WithAckMode(bus.AckManual))
	assert.True(t, res.Snoozed, res.String())
	assert.Equal(t, 3*time.Second, res.Delay)

	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Nack(errors.New("429"), time.Minute)
	}, &bus.Message{Payload: []byte("x")})
	assert.False(t, res.Snoozed, "Nack counts: %s", res)
}

// Delays longer than 100 years are cut to 100 years, and a snooze
// without a positive delay is a counted retry, not a snooze.
func TestRunCutsHugeDelaysAndRefusesSnoozesWithoutDelay(t *testing.T) {
	const forever, century = time.Duration(math.MaxInt64), 100 * 365 * 24 * time.Hour
	res := bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Nack(errors.New("much later"), forever)
	}, &bus.Message{Payload: []byte("x")})
	assert.Equal(t, century, res.Delay, "Nack(err, math.MaxInt64) waits 100 years: %s", res)

	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Snooze(forever)
	}, &bus.Message{Payload: []byte("x")})
	assert.Equal(t, century, res.Delay, "Snooze(math.MaxInt64) waits 100 years (and counts, past the 24-hour window): %s", res)

	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Snooze(0)
	}, &bus.Message{Payload: []byte("x")})
	assert.False(t, res.Snoozed, "bus.Snooze(0) is no snooze: %s", res)
	assert.Equal(t, bus.OutcomeNacked, res.Outcome, "but a retry that counts: %s", res)

	var snoozeErr, ackErr error
	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		snoozeErr = d.Snooze(ctx, 0)
		ackErr = d.Ack(ctx)
		return nil
	}, &bus.Message{Payload: []byte("x")}, bustest.WithAckMode(bus.AckManual))
	assert.ErrorIs(t, snoozeErr, bus.ErrInvalidOption, "Delivery.Snooze(0) is refused")
	assert.NoError(t, ackErr, "and leaves the delivery to settle")
	assert.Equal(t, bus.OutcomeAcked, res.Outcome, res.String())
}

// Run records the handler's own retry delay (bus.Nack) and an
// expired message that never reaches the handler.
func TestRunRecordsNackDelayAndExpiry(t *testing.T) {
	res := bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		return bus.Nack(errors.New("429"), 40*time.Second)
	}, &bus.Message{Payload: []byte("x")})
	assert.Equal(t, bus.OutcomeNacked, res.Outcome, res.String())
	assert.Equal(t, 40*time.Second, res.Delay, "the handler's delay, not the backoff")

	res = bustest.Run(t, func(ctx context.Context, d *bus.Delivery) error {
		t.Error("an expired message reached the handler")
		return nil
	}, &bus.Message{Payload: []byte("x"), ExpiresAt: time.Now().Add(-time.Second)})
	assert.False(t, res.Called)
	assert.Equal(t, bus.OutcomeDeadLettered, res.Outcome, res.String())
	assert.Equal(t, bus.CodeExpired, res.Code)
}
