package bus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// snoozeRecorder is a backend subscription that records the delays of
// its snoozes and nacks.
type snoozeRecorder struct {
	mu      sync.Mutex
	snoozes []time.Duration
	nacks   int
}

func (r *snoozeRecorder) Receive(context.Context, int) ([]*backend.Message, error) { return nil, nil }
func (r *snoozeRecorder) Ack(context.Context, []backend.AckID) error               { return nil }
func (r *snoozeRecorder) Close() error                                             { return nil }

func (r *snoozeRecorder) Nack(context.Context, backend.AckID, time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nacks++
	return nil
}

func (r *snoozeRecorder) Snooze(_ context.Context, _ backend.AckID, delay time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snoozes = append(r.snoozes, delay)
	return nil
}

// newEarlySub returns a consumer over r that is never started: the tests
// call early themselves.
func newEarlySub(r *snoozeRecorder, ackTimeout time.Duration) *consumer {
	return newTestConsumer(r, consumerConfig{MaxInFlight: 4, AckTimeout: ackTimeout, Caps: backend.Capabilities{Redelivery: true}})
}

// earlyRecord is a delivery of s due at.
func earlyRecord(s *consumer, at time.Time) *record {
	d := &record{sub: s, received: monoNow(), attempt: 1}
	d.pub.DeliverAt, d.pub.rec = at, d
	return d
}

// An early delivery due later than the member holds is given back to come
// back returnLead before its DeliverAt (or the hold, when a short ack
// timeout makes the hold shorter), without counting an attempt: coming
// back the whole hold early, the deliveries given back together would
// fill the slots for most of it.
func TestEarlyDeliveryComesBackJustBeforeItIsDue(t *testing.T) {
	tests := []struct {
		name       string
		ackTimeout time.Duration
		due        time.Duration
		lead       time.Duration
	}{
		{"due in 2s", 30 * time.Second, 2 * time.Second, returnLead},
		{"due in 10m", 30 * time.Second, 10 * time.Minute, returnLead},
		{"a hold shorter than returnLead", 150 * time.Millisecond, time.Second, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &snoozeRecorder{}
			s := newEarlySub(r, tt.ackTimeout)
			d := earlyRecord(s, time.Now().Add(tt.due))
			require.True(t, s.early(d), "a delivery due in %v is not handled now", tt.due)
			require.Len(t, r.snoozes, 1, "given back once, as a snooze")
			assert.Zero(t, r.nacks, "the give-back does not count an attempt")
			want := tt.due - tt.lead
			assert.LessOrEqual(t, r.snoozes[0], want, "comes back %v before its DeliverAt", tt.lead)
			// The test's own time between making d and early is the slack.
			assert.Greater(t, r.snoozes[0], want-200*time.Millisecond, "comes back %v before its DeliverAt, not earlier", tt.lead)
			assert.Equal(t, OutcomeNacked, d.outcome(), "the delivery is settled as given back")
		})
	}
}

// An early delivery due within the hold waits in the member, then runs:
// never before its DeliverAt, and without going back to the group.
func TestEarlyDeliveryDueWithinTheHoldWaitsInTheMember(t *testing.T) {
	r := &snoozeRecorder{}
	s := newEarlySub(r, 30*time.Second)
	at := time.Now().Add(returnLead + 20*time.Millisecond)
	d := earlyRecord(s, at)
	require.False(t, s.early(d), "a delivery due within the hold runs once due")
	assert.False(t, time.Now().Before(at), "it runs at or after its DeliverAt")
	assert.Empty(t, r.snoozes, "it is not given back")
	assert.Zero(t, r.nacks, "it is not nacked")
}
