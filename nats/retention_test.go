package nats_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// streamMsgs returns the messages stored on subject (all of the stream
// when subject is empty) of stream.
func streamMsgs(t *testing.T, url, stream, subject string) (msgs, bytes uint64) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	var opts []jetstream.StreamInfoOpt
	if subject != "" {
		opts = append(opts, jetstream.WithSubjectFilter(subject))
	}
	info, err := st.Info(ctx, opts...)
	require.NoError(t, err)
	if subject != "" {
		return info.State.Subjects[subject], info.State.Bytes
	}
	return info.State.Msgs, info.State.Bytes
}

// publishMsgs publishes n messages of 200 bytes to topic, 100 a call.
func publishMsgs(t *testing.T, b *bus.Bus, topic string, n int) {
	t.Helper()
	for off := 0; off < n; off += 100 {
		msgs := make([]*bus.Message, min(100, n-off))
		for i := range msgs {
			msgs[i] = &bus.Message{Payload: make([]byte, 200)}
		}
		require.NoError(t, b.Publish(context.Background(), topic, msgs...))
	}
}

func TestBoundRetentionCapsAStreamPerTopic(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{})
	be := connect(t, url, o)
	b := bus.New(be)
	defer b.Close(ctx)
	const byLen, byAge, bound = "retlen", "retage", 300
	require.NoError(t, be.BoundRetention(ctx, byLen, backend.RetentionBound{MaxLen: bound}))
	require.NoError(t, be.BoundRetention(ctx, byAge, backend.RetentionBound{MaxAge: time.Second}))
	publishMsgs(t, b, byLen, 3000)
	publishMsgs(t, b, byAge, 500)
	n, bytes := streamMsgs(t, url, o.StreamPrefix+"_"+byLen, "")
	t.Logf("3000 published to a topic bounded at %d: %d messages (%d bytes) kept", bound, n, bytes)
	assert.Equal(t, uint64(bound), n, "the stream keeps its newest %d messages with no consumer", bound)
	require.Eventually(t, func() bool { n, _ := streamMsgs(t, url, o.StreamPrefix+"_"+byAge, ""); return n == 0 }, 20*time.Second, 20*time.Millisecond,
		"messages past the age bound are dropped with no consumer")
}

func TestBoundRetentionPurgesATopicOfASharedStream(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{StreamMode: busnats.StreamShared})
	be := connect(t, url, o)
	b := bus.New(be)
	defer b.Close(ctx)
	const bounded, other, bound = "retbounded", "retother", 300
	require.NoError(t, be.BoundRetention(ctx, bounded, backend.RetentionBound{MaxLen: bound}))
	publishMsgs(t, b, bounded, 1000)
	publishMsgs(t, b, other, 500)
	require.Eventually(t, func() bool {
		n, _ := streamMsgs(t, url, o.StreamName, o.SubjectPrefix+"."+bounded)
		return n == bound
	}, 20*time.Second, 20*time.Millisecond, "the bounded topic is purged to its newest %d messages", bound)
	n, _ := streamMsgs(t, url, o.StreamName, o.SubjectPrefix+"."+other)
	assert.Equal(t, uint64(500), n, "the other topics of the shared stream keep theirs")
}

func TestInterestRetentionKeepsNothingSettledWithNoSubscriber(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{Retention: busnats.RetentionInterest})
	cons, pub := bus.New(connect(t, url, o)), bus.New(connect(t, url, o))
	defer pub.Close(ctx)
	const topic, n = "retinterest", 400
	var handled atomic.Int64
	sub, err := cons.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { handled.Add(1); return nil }, bus.WithGroup("g"))
	require.NoError(t, err)
	publishMsgs(t, pub, topic, n)
	require.Eventually(t, func() bool { return handled.Load() == n }, 20*time.Second, 10*time.Millisecond, "every message handled")
	require.NoError(t, sub.Close(ctx))
	require.NoError(t, cons.Close(ctx))
	require.Eventually(t, func() bool { m, _ := streamMsgs(t, url, o.StreamPrefix+"_"+topic, ""); return m == 0 }, 20*time.Second, 10*time.Millisecond,
		"with retention=interest nothing the group settled stays after the consumer exits")
	// Published while the group's consumer runs nowhere: kept for it.
	publishMsgs(t, pub, topic, 100)
	m, _ := streamMsgs(t, url, o.StreamPrefix+"_"+topic, "")
	assert.Equal(t, uint64(100), m, "what the group has not settled is kept")
}

func TestEventsTopicStaysWithinItsBound(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{})
	const topic, events, bound, n = "retwork", "retevents", 20, 2000
	b := bus.New(connect(t, url, o), bus.WithEvents(events), bus.WithEventsRetention(time.Hour, bound))
	defer b.Close(ctx)
	var handled atomic.Int64
	_, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { handled.Add(1); return nil }, bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	for i := range n / 50 {
		publishMsgs(t, b, topic, 50)
		require.Eventually(t, func() bool { return handled.Load() == int64(50*(i+1)) }, 20*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { m, _ := streamMsgs(t, url, o.StreamPrefix+"_"+events, ""); return m > 0 }, 20*time.Second, 10*time.Millisecond,
		"events are written")
	m, bytes := streamMsgs(t, url, o.StreamPrefix+"_"+events, "")
	t.Logf("events topic bounded at %d messages after %d deliveries: %d messages (%d bytes)", bound, n, m, bytes)
	assert.LessOrEqual(t, m, uint64(bound), "the events stream stays within its bound")
}

func TestInterestRetentionKeepsNothingOfATopicWithNoGroup(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{Retention: busnats.RetentionInterest})
	pub := bus.New(connect(t, url, o))
	defer pub.Close(ctx)
	const topic = "retnogroup"
	publishMsgs(t, pub, topic, 100)
	m, _ := streamMsgs(t, url, o.StreamPrefix+"_"+topic, "")
	assert.Zero(t, m, "with retention=interest the server keeps nothing no group is there for")
}
