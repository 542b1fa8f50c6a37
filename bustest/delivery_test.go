package bustest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewDeliveryCarriesMessageAndOptions(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	d := bustest.NewDelivery(t, &bus.Message{ID: "m-1", Key: "k", Headers: map[string]string{"h": "v"}, Payload: []byte("p")},
		bustest.WithTopic("orders"), bustest.WithGroup("billing"), bustest.WithAttempt(3), bustest.WithPublishedAt(at))
	assert.Equal(t, "m-1", d.ID)
	assert.Equal(t, "k", d.Key)
	assert.Equal(t, map[string]string{"h": "v"}, d.Headers)
	assert.Equal(t, []byte("p"), d.Payload)
	assert.Equal(t, "orders", d.Topic)
	assert.Equal(t, "billing", d.Group)
	assert.Equal(t, 3, d.Attempt)
	assert.True(t, at.Equal(d.PublishedAt), "published at %v, want %v", d.PublishedAt, at)
	assert.Equal(t, bus.OutcomePending, d.Outcome(), "nothing settled it yet")
}

func TestNewDeliveryAssignsIDLikePublish(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{Payload: []byte("p")})
	assert.NotEmpty(t, d.ID, "an empty ID is generated")
}

func TestRecordsAck(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{ID: "m"})
	require.NoError(t, d.Ack(context.Background()))
	assert.Equal(t, bus.OutcomeAcked, d.Outcome())
	err := d.Nack(context.Background(), time.Second)
	require.ErrorIs(t, err, bus.ErrAlreadySettled, "the first settlement wins, as in production")
	_, nacked := d.NackDelay()
	assert.False(t, nacked, "the late nack did not reach the backend")
}

func TestRecordsNackDelay(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{ID: "m"})
	require.NoError(t, d.Nack(context.Background(), 3*time.Second))
	assert.Equal(t, bus.OutcomeNacked, d.Outcome())
	delay, ok := d.NackDelay()
	require.True(t, ok, "nacked")
	assert.Equal(t, 3*time.Second, delay)
}

func TestRecordsRejectReasonAndDeadLetterCopy(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{ID: "m", Payload: []byte("bad")}, bustest.WithTopic("orders"))
	require.NoError(t, d.Reject(context.Background(), errors.New("schema v1 is not supported")))
	assert.Equal(t, bus.OutcomeDeadLettered, d.Outcome())
	reason, ok := d.RejectReason()
	require.True(t, ok, "dead-lettered")
	assert.Contains(t, reason, "schema v1 is not supported")
	cp := d.DeadLetter()
	require.NotNil(t, cp)
	assert.Equal(t, []byte("bad"), cp.Payload)
	assert.Equal(t, "orders", cp.Headers[bus.HeaderDeadLetterTopic])
}

func TestRejectWithoutDeadLetterDrops(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{ID: "m"}, bustest.WithoutDeadLetter())
	require.NoError(t, d.Reject(context.Background(), errors.New("nope")))
	assert.Equal(t, bus.OutcomeDropped, d.Outcome())
	_, ok := d.RejectReason()
	assert.False(t, ok, "nothing dead-lettered")
	assert.Nil(t, d.DeadLetter())
}

func TestRecordsExtensions(t *testing.T) {
	d := bustest.NewDelivery(t, &bus.Message{ID: "m"})
	for range 3 {
		require.NoError(t, d.Extend(context.Background()))
	}
	assert.Equal(t, 3, d.Extensions())
	assert.Contains(t, d.String(), "3 extensions")
}

func TestHandlerUnderTest(t *testing.T) {
	// A manual-mode handler that nacks retriable input and rejects the rest.
	handler := func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "later" {
			return d.Nack(ctx, time.Minute)
		}
		return d.Reject(ctx, errors.New("unknown command"))
	}
	tests := []struct {
		payload string
		want    bus.Outcome
	}{
		{"later", bus.OutcomeNacked},
		{"bogus", bus.OutcomeDeadLettered},
	}
	for _, tt := range tests {
		d := bustest.NewDelivery(t, &bus.Message{Payload: []byte(tt.payload)})
		require.NoError(t, handler(context.Background(), d.Delivery), "payload %q", tt.payload)
		assert.Equal(t, tt.want, d.Outcome(), "payload %q: %s", tt.payload, d)
	}
}
