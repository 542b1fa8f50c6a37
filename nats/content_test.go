package nats_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestLargestMessageFits: a payload at the bus's limit for this backend
// with the largest header block the bus accepts, every value needing the
// wire encoding, is stored and delivered byte-exact rather than failing
// with the server's "maximum payload exceeded".
func TestLargestMessageFits(t *testing.T) {
	url := natstest.Start(t).URL()
	for _, tt := range []struct {
		name string
		opts busnats.Options
	}{{"JetStream", busnats.Options{}}, {"Core", busnats.Options{CoreNATS: true}}} {
		t.Run(tt.name, func(t *testing.T) {
			o := isolated(t, url, tt.opts)
			be := connect(t, url, o)
			b := bus.New(be)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			defer b.Close(ctx)
			maxPayload := be.Capabilities().MaxPayload
			require.Positive(t, maxPayload)
			headers := map[string]string{}
			per := backend.MaxHeaderBytes/backend.MaxHeaders - 4
			for i := range backend.MaxHeaders {
				k := "h" + strconv.Itoa(i)
				headers[k] = " " + strings.Repeat("\n", per-len(k)-2) + " "
			}
			m := &bus.Message{ID: strings.Repeat("i", backend.MaxIDLen), Key: strings.Repeat("\r", backend.MaxKeyLen), Headers: headers, Payload: make([]byte, maxPayload)}
			got := make(chan *bus.Delivery, 1)
			_, err := b.Subscribe(ctx, "largest", func(_ context.Context, d *bus.Delivery) error {
				got <- d
				return nil
			})
			require.NoError(t, err)
			require.NoError(t, b.Publish(ctx, "largest", m), "the largest message the bus accepts is stored")
			select {
			case d := <-got:
				assert.Equal(t, m.ID, d.ID)
				assert.Equal(t, m.Key, d.Key)
				assert.Equal(t, headers, d.Headers)
				assert.Len(t, d.Payload, maxPayload)
			case <-ctx.Done():
				t.Fatal("not delivered")
			}
		})
	}
}
