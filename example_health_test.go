package bus_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/eventbus-go/bus"
)

// Readiness and liveness probes over net/http: readiness asks the broker
// for one round trip (Bus.Ping); liveness asks whether the subscription
// still runs and has received within the last half minute, unless it
// waits, by design, for its turn (Standby).
func ExampleBus_Ping() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)
	sub, err := b.Subscribe(ctx, "orders.created", func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := b.Ping(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ready")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		h := sub.Health()
		switch {
		case !h.Running:
			http.Error(w, fmt.Sprintf("subscription ended: %v", h.Err), http.StatusServiceUnavailable)
		case h.Failing > 0 && !h.Standby && time.Since(h.LastReceive) > 30*time.Second:
			http.Error(w, fmt.Sprintf("no receive for %d attempts: %v", h.Failing, h.LastError), http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, "live")
		}
	})
	probe := func(path string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, rec.Body.String())
	}

	probe("/readyz")
	probe("/livez")
	if err := sub.Close(ctx); err != nil {
		panic(err)
	}
	probe("/livez")
	// Output:
	// /readyz 200 ready
	// /livez 200 live
	// /livez 503 subscription ended: <nil>
}
