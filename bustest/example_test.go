package bustest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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
