package bustest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
)

// resize is the handler under test: it nacks while a dependency is busy
// and rejects input it can never handle.
func resize(ctx context.Context, d *bus.Delivery) error {
	switch string(d.Payload) {
	case "busy":
		return d.Nack(ctx, 30*time.Second)
	case "corrupt":
		return d.Reject(ctx, errors.New("not an image"))
	default:
		return d.Ack(ctx)
	}
}

// exampleT stands in for the *testing.T a real test passes, so that the
// example runs stand-alone.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                        {}
func (t *exampleT) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, a ...any) { fmt.Printf("error: "+format+"\n", a...) }
func (t *exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// Test a handler's settlements without a broker. In a test, pass its
// *testing.T to NewDelivery.
func ExampleNewDelivery() {
	t := &exampleT{}
	defer t.end()
	for _, payload := range []string{"ok.png", "busy", "corrupt"} {
		d := bustest.NewDelivery(t, &bus.Message{ID: payload, Payload: []byte(payload)})
		if err := resize(context.Background(), d.Delivery); err != nil {
			fmt.Println("error:", err)
		}
		delay, _ := d.NackDelay()
		reason, _ := d.RejectReason()
		fmt.Printf("%s: %s delay=%v reason=%q\n", payload, d.Outcome(), delay, reason)
	}
	// Output:
	// ok.png: ack delay=0s reason=""
	// busy: nack delay=30s reason=""
	// corrupt: dead_letter delay=0s reason="not an image"
}

// charge is an AckOnSuccess handler under test: nil acks, an error retries,
// a rejected error dead-letters.
func charge(ctx context.Context, d *bus.Delivery) error {
	switch string(d.Payload) {
	case "gateway-down":
		return errors.New("payment gateway unavailable")
	case "bad-card":
		return bus.Reject(errors.New("card number is malformed"))
	}
	return nil
}

// Run reports what the bus would do with a message once the handler
// returned: ack, retry after which delay, or dead-letter with which code.
// Give it the subscription's options; in a test, pass its *testing.T.
func ExampleRun() {
	t := &exampleT{}
	defer t.end()
	sub := bustest.Subscribe(
		bus.WithMaxDeliveries(5),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(30 * time.Second) }),
	)
	fmt.Println(bustest.Run(t, charge, &bus.Message{Payload: []byte("ok")}, sub))
	fmt.Println(bustest.Run(t, charge, &bus.Message{Payload: []byte("gateway-down")}, sub))
	fmt.Println(bustest.Run(t, charge, &bus.Message{Payload: []byte("gateway-down")}, sub, bustest.WithAttempt(5)))
	fmt.Println(bustest.Run(t, charge, &bus.Message{Payload: []byte("bad-card")}, sub))
	// Output:
	// ack (handler error: <nil>)
	// nacked for 30s (handler error: payment gateway unavailable)
	// dead_letter with code max_deliveries: max deliveries (5) reached: payment gateway unavailable
	// dead_letter with code rejected: card number is malformed
}
