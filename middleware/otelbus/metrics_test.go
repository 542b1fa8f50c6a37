package otelbus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/eventbus-go/bus"
)

func TestMetricsCountExactlyWhatHappened(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	seen := map[string]int{}
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		seen[d.ID]++
		n := seen[d.ID]
		mu.Unlock()
		switch string(d.Payload) {
		case "bad":
			return bus.Reject(errString("bad"))
		case "flaky":
			if n == 1 {
				return errString("flaky")
			}
		}
		return nil
	}, bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }))

	const good, bad, flaky = 5, 2, 1
	var msgs []*bus.Message
	for range good {
		msgs = append(msgs, &bus.Message{Payload: []byte("ok")})
	}
	for range bad {
		msgs = append(msgs, &bus.Message{Payload: []byte("bad")})
	}
	msgs = append(msgs, &bus.Message{Payload: []byte("flaky")})
	require.NoError(t, e.bus.Publish(context.Background(), "orders", msgs[:4]...), "batch publish")
	for _, m := range msgs[4:] {
		require.NoError(t, e.bus.Publish(context.Background(), "orders", m), "single publish")
	}
	e.waitSettled(t, good+bad+flaky+1) // the flaky one twice

	const published, delivered = good + bad + flaky, good + bad + 2*flaky
	want := map[string]int64{
		"bus.messages.published":      published,
		"bus.messages.publish_failed": 0,
		"bus.messages.delivered":      delivered,
		"bus.messages.failed":         bad + flaky,
		"bus.messages.acked":          good + flaky,
		"bus.messages.nacked":         flaky,
		"bus.messages.dead_lettered":  bad,
		"bus.messages.dropped":        0,
		"bus.messages.lease_lost":     0,
		"bus.messages.in_flight":      0,
	}
	var m = e.metrics(t)
	require.Eventually(t, func() bool {
		m = e.metrics(t)
		for name, v := range want {
			if sum(m, name) != v {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "settlement hooks finish after the test's own")
	for name, v := range want {
		assert.Equal(t, v, sum(m, name), name)
	}
	assert.Equal(t, uint64(delivered), count(m, "bus.handler.duration"), "one duration per handler call")
	assert.Equal(t, uint64(delivered), count(m, "bus.e2e.latency"), "one latency per delivery")
	for _, dp := range sumPoints(m["bus.messages.dead_lettered"]) {
		code, ok := dp.Attributes.Value(DeadLetterCodeKey)
		require.True(t, ok, "dead letters carry their reason code")
		assert.Equal(t, "rejected", code.AsString(), "the bad messages were dead-lettered as rejected")
	}
}

func TestMetricsCountRejectedPublishAsFailed(t *testing.T) {
	e := newEnv(t)
	err := e.bus.Publish(context.Background(), "orders",
		&bus.Message{}, &bus.Message{Headers: map[string]string{"bus-x": "reserved"}})
	require.ErrorIs(t, err, bus.ErrInvalidMessage, "reserved header rejected")
	m := e.metrics(t)
	assert.Equal(t, int64(0), sum(m, "bus.messages.published"), "nothing of a rejected batch is published")
	assert.Equal(t, int64(2), sum(m, "bus.messages.publish_failed"), "the whole batch failed")
	creates := e.endedSpans(t, "create orders", 2)
	for _, s := range creates {
		assert.Equal(t, "Error", s.Status().Code.String(), "every create span of the rejected batch has an error")
	}
}

func TestMetricsCarryTopicGroupAndSystem(t *testing.T) {
	e := newEnv(t)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error { return nil }, bus.WithGroup("billing"))
	require.NoError(t, e.bus.Publish(context.Background(), "orders", &bus.Message{}))
	e.waitSettled(t, 1)
	require.Eventually(t, func() bool { return sum(e.metrics(t), "bus.messages.acked") == 1 }, 5*time.Second, 5*time.Millisecond)
	m := e.metrics(t)
	acked := m["bus.messages.acked"]
	require.NotNil(t, acked)
	dp := sumPoints(acked)[0]
	for k, v := range map[string]string{
		"messaging.system": "inmemory", "messaging.destination.name": "orders", "messaging.consumer.group.name": "billing",
	} {
		got, ok := dp.Attributes.Value(attribute.Key(k))
		require.True(t, ok, "attribute %s present", k)
		assert.Equal(t, v, got.AsString(), "attribute %s", k)
	}
	pub := sumPoints(m["bus.messages.published"])[0]
	_, hasGroup := pub.Attributes.Value(attribute.Key("messaging.consumer.group.name"))
	assert.False(t, hasGroup, "publish side has no group")
}

func sumPoints(a metricdata.Aggregation) []metricdata.DataPoint[int64] {
	s, _ := a.(metricdata.Sum[int64])
	return s.DataPoints
}
