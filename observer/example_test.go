package observer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/eventbus-go/bus/observer"
)

// Multi sends each event to several observers: here a structured log and
// a function that counts dead letters. Pass the result to
// bus.WithObserver.
func ExampleMulti() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // stable output for the example
			}
			return a
		},
	}))
	deadLetters := 0
	obs := observer.Multi(
		observer.Slog(logger),
		observer.Func(func(_ context.Context, e observer.Event) {
			if e.Scope == observer.ScopeDeadLetter {
				deadLetters++
			}
		}),
	)

	obs.Observe(context.Background(), observer.Event{Scope: observer.ScopeHandler, Topic: "orders", MessageID: "m-1", Attempt: 1, Err: errors.New("db busy")})
	obs.Observe(context.Background(), observer.Event{Scope: observer.ScopeDeadLetter, Topic: "orders", MessageID: "m-1", Attempt: 5, Code: "max_deliveries", Err: errors.New("max deliveries (5) reached: db busy")})
	fmt.Println("dead letters:", deadLetters)
	// Output:
	// level=WARN msg="bus: message dead-lettered" scope=dead_letter topic=orders message_id=m-1 attempt=5 code=max_deliveries error="max deliveries (5) reached: db busy"
	// dead letters: 1
}
