package sqs

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/observer"
)

// TestExtendNeverHidesANackedMessage: the bus's keep-alive may extend a
// delivery while a closing member gives it back (Nack with no delay).
// The Nack goes to SQS only once the Extend under way has its answer, so
// the Nack's visibility is the last: the message is handed out again at
// once, and on a FIFO queue before the message of its group after it.
func TestExtendNeverHidesANackedMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := url.Parse(awstest.Start(t).URL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("fifo", "true")
	u.RawQuery = q.Encode()
	b, err := OpenURL(ctx, u)
	require.NoError(t, err)
	defer b.Close()
	gate := &visibilityGate{next: b.sqs.Options().HTTPClient, held: make(chan struct{}), release: make(chan struct{})}
	defer gate.open()
	b.sqs = sqs.New(b.sqs.Options(), func(o *sqs.Options) { o.HTTPClient = gate })

	const lease = 30 * time.Second
	sub, err := b.Subscribe(ctx, "hidden", backend.SubscribeConfig{Group: "g", AckTimeout: lease, MaxInFlight: 1, Observer: observer.Nop()})
	require.NoError(t, err)
	defer sub.Close()
	require.NoError(t, b.Publish(ctx, "hidden", []*backend.Message{
		{ID: "m1", Key: "k", Payload: []byte("1")},
		{ID: "m2", Key: "k", Payload: []byte("2")},
	}))
	first := receiveOne(ctx, t, sub)
	require.Equal(t, "m1", first.ID, "the group's first message comes first")
	ext := sub.(backend.Extender)

	extended := make(chan error, 1)
	go func() { extended <- ext.Extend(ctx, first.AckID) }()
	select {
	case <-gate.held:
	case <-ctx.Done():
		t.Fatal("the Extend reaches SQS")
	}
	nacked := make(chan error, 1)
	go func() { nacked <- sub.Nack(ctx, first.AckID, 0) }()
	assert.Never(t, gate.nackSent.Load, time.Second, 10*time.Millisecond, "the Nack waits for the Extend under way")
	gate.open()
	require.NoError(t, <-extended, "the Extend, under way first, restarts the lease")
	require.NoError(t, <-nacked, "the Nack gives the message back after it")

	again := receiveOne(ctx, t, sub)
	assert.Equal(t, "m1", again.ID, "the nacked message is handed out again, before the next of its group")
	assert.Equal(t, 2, again.Attempt, "the nack counted an attempt")
}

// receiveOne receives until sub hands out a message, within ctx and well
// before a lease of TestExtendNeverHidesANackedMessage could end.
func receiveOne(ctx context.Context, t *testing.T, sub backend.Subscription) *backend.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msgs, err := sub.Receive(ctx, 1)
		require.NoError(t, err, "a message is handed out within 10s")
		if len(msgs) > 0 {
			return msgs[0]
		}
	}
}

// visibilityGate holds the first ChangeMessageVisibility request until
// open, and records whether a later one was sent meanwhile.
type visibilityGate struct {
	next     sqs.HTTPClient
	first    sync.Once
	held     chan struct{}
	opened   sync.Once
	release  chan struct{}
	nackSent atomic.Bool
}

func (g *visibilityGate) open() { g.opened.Do(func() { close(g.release) }) }

func (g *visibilityGate) Do(r *http.Request) (*http.Response, error) {
	if target := r.Header.Get("X-Amz-Target"); strings.HasSuffix(target, ".ChangeMessageVisibility") {
		first := false
		g.first.Do(func() { first = true })
		if first {
			close(g.held)
			select {
			case <-g.release:
			case <-r.Context().Done():
			}
		} else {
			g.nackSent.Store(true)
		}
	}
	return g.next.Do(r)
}
