package bus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	_ "github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

func fastBackoff() bus.SubscribeOption {
	return bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) })
}

// lockedBuffer is a bytes.Buffer safe for the bus's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.FieldsFunc(b.buf.String(), func(r rune) bool { return r == '\n' })
}

// withDefaultLogger makes slog.Default write text lines at Info and above
// to the returned buffer for the test's duration.
func withDefaultLogger(t *testing.T) *lockedBuffer {
	buf := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return buf
}

// retriedThenDead runs a handler that fails every attempt on a bus made
// with opts, and waits until its message was dead-lettered.
func retriedThenDead(t *testing.T, opts ...bus.Option) {
	b, err := bus.Open(context.Background(), "mem://", opts...)
	require.NoError(t, err, "open mem://")
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	dead := make(chan struct{}, 1)
	_, err = b.Subscribe(context.Background(), "orders.dlq", func(context.Context, *bus.Delivery) error {
		dead <- struct{}{}
		return nil
	}, bus.WithGroup("ops"))
	require.NoError(t, err, "subscribe to the dead-letter topic")
	_, err = b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		return errors.New("db busy")
	}, bus.WithMaxDeliveries(3), fastBackoff())
	require.NoError(t, err, "subscribe")
	require.NoError(t, b.Publish(context.Background(), "orders", &bus.Message{ID: "m-1"}), "publish")
	select {
	case <-dead:
	case <-time.After(waitFor):
		t.Fatal("the message was not dead-lettered")
	}
}

func TestNoObserverLogsOneWarnPerDeadLetterAndNothingPerRetry(t *testing.T) {
	buf := withDefaultLogger(t)
	retriedThenDead(t)
	var warns []string
	for _, l := range buf.lines() {
		assert.NotContains(t, l, "db busy\" scope=handler", "a retried handler error is not logged at Info or above")
		if strings.Contains(l, "level=WARN") {
			warns = append(warns, l)
		}
	}
	require.Len(t, warns, 1, "one WARN for the dead-lettering, got %q", buf.lines())
	assert.Contains(t, warns[0], "message dead-lettered", "it says the message was dead-lettered")
	assert.Contains(t, warns[0], "code=max_deliveries", "with its code")
	assert.Contains(t, warns[0], "message_id=m-1", "and its message ID")
}

func TestNopObserverSilencesTheDefaultLog(t *testing.T) {
	buf := withDefaultLogger(t)
	retriedThenDead(t, bus.WithObserver(observer.Nop()))
	assert.Empty(t, buf.lines(), "observer.Nop() silences the default logging")
}

func TestMaxExtensionCapsTheKeepAliveWithLeaseLost(t *testing.T) {
	b, err := bus.Open(context.Background(), "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err, "open mem://")
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	const ackTimeout, maxExtension = 80 * time.Millisecond, 200 * time.Millisecond
	type result struct {
		cause error
		ran   time.Duration
	}
	got := make(chan result, 2)
	_, err = b.Subscribe(context.Background(), "long", func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		begin := time.Now()
		select {
		case <-ctx.Done():
			got <- result{context.Cause(ctx), time.Since(begin)}
		case <-time.After(waitFor):
			got <- result{nil, time.Since(begin)}
		}
		return nil
	}, bus.WithAckTimeout(ackTimeout), bus.WithMaxExtension(maxExtension))
	require.NoError(t, err, "subscribe")
	require.NoError(t, b.Publish(context.Background(), "long", &bus.Message{}), "publish")
	r := <-got
	require.ErrorIs(t, r.cause, bus.ErrLeaseLost, "the keep-alive stops at the max extension")
	assert.Contains(t, r.cause.Error(), "max extension", "the cause names the cap")
	assert.Greater(t, r.ran, ackTimeout, "the lease was kept alive past the ack timeout before the cap")
}
