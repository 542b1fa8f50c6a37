package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// A delayed message waits at the server as a schedule, which the
// inspector counts apart from the topic's messages, and arrives with its
// ID, its publish time and Attempt 1; in a shared stream too.
func TestDeliverAtWaitsAsASchedule(t *testing.T) {
	for _, mode := range []busnats.StreamMode{busnats.StreamPerTopic, busnats.StreamShared} {
		t.Run(mode.String(), func(t *testing.T) {
			// A server of its own: creating the shared stream right after
			// the other mode's streams were deleted on the same server
			// failed now and then under load ("error creating store for
			// stream", 2 of 5 CI runs).
			url := natstest.Start(t).URL()
			be := connect(t, url, isolated(t, url, busnats.Options{StreamMode: mode}))
			require.True(t, be.Capabilities().Scheduling, "JetStream holds scheduled messages")
			b := bus.New(be)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			defer func() { require.NoError(t, b.Close(ctx)) }()
			got := make(chan *bus.Delivery, 2)
			_, err := b.Subscribe(ctx, "reminders", func(_ context.Context, d *bus.Delivery) error {
				got <- d
				return nil
			}, bus.WithGroup("g"))
			require.NoError(t, err)
			soon := &bus.Message{ID: "soon", Payload: []byte("s"), DeliverAt: time.Now().Add(time.Second)}
			later := &bus.Message{ID: "later", Payload: []byte("l"), DeliverAt: time.Now().Add(time.Hour)}
			before := time.Now()
			require.NoError(t, b.Publish(ctx, "reminders", soon, later))
			ts, err := b.Topics(ctx)
			require.NoError(t, err)
			require.Len(t, ts, 1)
			if time.Now().Before(soon.DeliverAt) {
				assert.EqualValues(t, 2, ts[0].Scheduled, "both wait as schedules")
				assert.EqualValues(t, 0, ts[0].Messages, "none is the topic's yet")
			} else {
				// A loaded machine took longer than soon's delay to
				// publish and count: soon may be the topic's by now.
				assert.EqualValues(t, 2, ts[0].Scheduled+ts[0].Messages, "both are counted, as schedules or the topic's")
				assert.Positive(t, ts[0].Scheduled, "later waits as a schedule")
			}
			select {
			case d := <-got:
				assert.Equal(t, "soon", d.ID, "the ID survives the schedule")
				assert.Equal(t, 1, d.Attempt)
				assert.False(t, time.Now().Before(soon.DeliverAt.Truncate(time.Millisecond)), "not early")
				assert.WithinDuration(t, before, d.PublishedAt, time.Second, "the publish time, not the schedule's")
			case <-ctx.Done():
				t.Fatal("the scheduled message did not arrive")
			}
			select {
			case d := <-got:
				t.Fatalf("%s arrived an hour early", d.ID)
			default:
			}
		})
	}
}

// A stream made without the schedule subject (by a bus before it) is
// changed to store schedules on the first delayed publish.
func TestDeliverAtUpgradesAnOlderStream(t *testing.T) {
	url := natstest.Start(t).URL()
	opts := isolated(t, url, busnats.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := bus.New(connect(t, url, busnats.WithoutSchedules(opts)))
	require.NoError(t, old.Publish(ctx, "jobs", &bus.Message{Payload: []byte("first")}))
	require.NoError(t, old.Close(ctx))

	b := bus.New(connect(t, url, opts))
	defer func() { require.NoError(t, b.Close(ctx)) }()
	require.NoError(t, b.Publish(ctx, "jobs", &bus.Message{Payload: []byte("later"), DeliverAt: time.Now().Add(time.Hour)}))
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 1)
	assert.EqualValues(t, 1, ts[0].Scheduled, "held as a schedule in the changed stream")
	assert.EqualValues(t, 1, ts[0].Messages, "the first message")
}
