package redisstream_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

func TestMalformedEntryIsDeadLetteredAndNeverReachesHandler(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	b, be, client := openBus(t, redistest.URL(t), nil, bus.WithObserver(rec))
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"

	// A foreign producer writes entries the bus cannot decode.
	// Wire names and values carry "LEAK": none may reach an event or a
	// dead-letter reason.
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"fooLEAK", "barLEAK"}}).Err())
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", "LEAK-not-a-number x1", "p", "zLEAK"}}).Err())
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "good", Payload: []byte("ok")}))

	got := make(chan string, 10)
	sub, err := b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		got <- d.ID
		return nil
	}, bus.WithStartFrom(backend.StartOldest), bus.WithGroup("g"))
	require.NoError(t, err)
	select {
	case id := <-got:
		require.Equal(t, "good", id, "only the well-formed message reaches the handler")
	case <-time.After(10 * time.Second):
		t.Fatal("the well-formed message behind two malformed ones was not delivered")
	}
	require.Eventually(t, func() bool { return rec.count(observer.ScopeDecode, "") == 2 }, 10*time.Second, 10*time.Millisecond,
		"both malformed entries are reported with ScopeDecode")
	require.NoError(t, sub.Close(ctx))
	select {
	case id := <-got:
		t.Fatalf("unexpected second delivery %q", id)
	default:
	}

	dlq, err := client.XRange(ctx, "bus:{"+topic+"}.dlq", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dlq, 2, "both malformed entries are in the dead-letter stream")
	assert.Contains(t, dlq[0].Values["h:bus-dlq-reason"], `missing "m" field (1 fields)`, "the reason names the problem")
	assert.Contains(t, dlq[0].Values["h:bus-dlq-reason"], dlq[0].Values["h:bus-dlq-id"], "the reason names the entry")
	for _, e := range dlq {
		assert.NotContains(t, e.Values["h:bus-dlq-reason"], "LEAK", "a dead-letter reason echoes no wire text")
	}
	assert.Zero(t, rec.count(observer.ScopeDecode, "LEAK"), "decode events echo no wire text")
	pending, err := client.XPending(ctx, stream, "g").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count, "malformed entries are acked, nothing stays pending")
	assert.EqualValues(t, 2, be.Stats().Malformed)
}

func TestTrimmedPendingEntryIsAckedCountedAndReported(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	b, be, client := openBus(t, redistest.URL(t), nil, bus.WithObserver(rec))
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"

	got := make(chan *bus.Delivery, 10)
	_, err := b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		got <- d // never settled: the lease runs out
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(200*time.Millisecond), bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "m1", Payload: []byte("x")}))
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	// Trim the entry away while it is pending.
	require.NoError(t, client.XTrimMaxLen(ctx, stream, 0).Err())

	require.Eventually(t, func() bool { return be.Stats().Trimmed == 1 }, 10*time.Second, 10*time.Millisecond,
		"the reclaimer counts the trimmed pending entry")
	assert.Equal(t, 1, rec.count(observer.ScopeReclaim, "trimmed"), "the loss is reported")
	pending, err := client.XPending(ctx, stream, "g").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count, "the trimmed entry is no longer pending")
}

func TestNackDelayLongerThanAckTimeoutIsHeldUntilDue(t *testing.T) {
	ctx := context.Background()
	b, _, client := openBus(t, redistest.URL(t), nil)
	topic := uniqueTopic(t)
	type seen struct {
		at      time.Time
		attempt int
	}
	got := make(chan seen, 10)
	const ackTimeout, delay = 200 * time.Millisecond, 1200 * time.Millisecond
	_, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		at := time.Now()
		var err error
		if d.Attempt == 1 {
			err = d.Nack(ctx, delay)
		} else {
			err = d.Ack(ctx)
		}
		got <- seen{at, d.Attempt} // after the settlement, so the hold is visible
		return err
	}, bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(ackTimeout), bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "m1", Payload: []byte("x")}))

	first := <-got
	require.Equal(t, 1, first.attempt)
	n, err := client.ZCard(ctx, "bus:{"+topic+"}#hold").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "a delay longer than the ack timeout is recorded as a hold")
	select {
	case second := <-got:
		assert.Equal(t, 2, second.attempt, "the redelivery counts one more attempt")
		assert.GreaterOrEqual(t, second.at.Sub(first.at), delay-50*time.Millisecond,
			"the entry is not redelivered before its delay although the ack timeout is much shorter")
	case <-time.After(10 * time.Second):
		t.Fatal("the held message was never redelivered")
	}
	select {
	case extra := <-got:
		t.Fatalf("unexpected extra delivery with attempt %d", extra.attempt)
	case <-time.After(3 * ackTimeout):
	}
}

func TestSettledRetentionNeverTrimsUnsettledEntries(t *testing.T) {
	ctx := context.Background()
	b, _, client := openBus(t, redistest.URL(t), &redisstream.Options{TrimInterval: 20 * time.Millisecond})
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"
	const n = 600

	// Group "slow" exists from the start and reads nothing.
	require.NoError(t, client.XGroupCreateMkStream(ctx, stream, "slow", "0").Err())
	var mu sync.Mutex
	acked := 0
	_, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		mu.Lock()
		acked++
		mu.Unlock()
		return nil
	}, bus.WithGroup("fast"), bus.WithStartFrom(backend.StartOldest))
	require.NoError(t, err)
	for i := range n / 100 {
		batch := make([]*bus.Message, 100)
		for j := range batch {
			batch[j] = &bus.Message{Payload: []byte{byte(i), byte(j)}}
		}
		require.NoError(t, b.Publish(ctx, topic, batch...))
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return acked == n }, 10*time.Second, 10*time.Millisecond)
	// Several trim passes run; "slow" still needs everything.
	require.Never(t, func() bool { return client.XLen(ctx, stream).Val() < n }, 300*time.Millisecond, 20*time.Millisecond,
		"entries group slow has not read are never trimmed")

	// Once "slow" has read and acked everything, the trimmer drops entries.
	res, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "slow", Consumer: "c", Streams: []string{stream, ">"}, Count: n}).Result()
	require.NoError(t, err)
	ids := make([]string, 0, n)
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	// Leave the last 50 pending: they must survive.
	require.NoError(t, client.XAck(ctx, stream, "slow", ids[:n-50]...).Err())
	require.Eventually(t, func() bool { return client.XLen(ctx, stream).Val() < n }, 10*time.Second, 20*time.Millisecond,
		"settled entries are trimmed")
	left, err := client.XRange(ctx, stream, ids[n-50], "+").Result()
	require.NoError(t, err)
	assert.Len(t, left, 50, "every unsettled entry is still in the stream")
}

func TestNoGroupIsRecreatedAndReported(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	b, be, client := openBus(t, redistest.URL(t), nil, bus.WithObserver(rec))
	topic := uniqueTopic(t)
	got := make(chan string, 10)
	_, err := b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		got <- d.ID
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, client.Del(ctx, "bus:{"+topic+"}").Err(), "delete the stream and its group under the subscription")
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "after", Payload: []byte("x")}))
	select {
	case id := <-got:
		assert.Equal(t, "after", id, "the message published after the loss is delivered")
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not recover from NOGROUP")
	}
	assert.Equal(t, 1, rec.count(observer.ScopeReclaim, "was missing"), "the loss is reported once")
	assert.EqualValues(t, 1, be.Stats().GroupsRecreated)
}

func TestOpenURL(t *testing.T) {
	base := redistest.URL(t)
	tests := []struct {
		name    string
		query   string
		wantErr string
	}{
		{name: "defaults", query: ""},
		{name: "backend and client params", query: "prefix=app&block=200ms&retention=maxlen&maxlen=1000&pool_size=4&trim_interval=1s"},
		{name: "maxage", query: "retention=maxage&maxage=1h"},
		{name: "unknown param", query: "bogus=1", wantErr: "unknown parameter"},
		{name: "skip_verify refused", query: "skip_verify=true", wantErr: "cannot be turned off"},
		{name: "bad retention", query: "retention=sometimes", wantErr: "retention"},
		{name: "maxlen mode without maxlen", query: "retention=maxlen", wantErr: "MaxLen"},
		{name: "block too long", query: "block=5s", wantErr: "block"},
		{name: "read linger off", query: "read_linger=-1"},
		{name: "read linger over block", query: "block=10ms&read_linger=20ms", wantErr: "read linger"},
		{name: "bad read linger", query: "read_linger=soon", wantErr: "read_linger"},
		{name: "bad duration", query: "block=soon", wantErr: "block"},
		{name: "addr without cluster", query: "addr=127.0.0.1:1", wantErr: "cluster=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(base)
			require.NoError(t, err)
			q := u.Query()
			extra, err := url.ParseQuery(tt.query)
			require.NoError(t, err)
			for k, v := range extra {
				q[k] = v
			}
			u.RawQuery = q.Encode()
			b, err := bus.Open(context.Background(), u.String())
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "redis", b.Capabilities().Name)
			require.NoError(t, b.Close(context.Background()))
		})
	}
}

func TestOpenURLRedactsPassword(t *testing.T) {
	_, err := bus.Open(context.Background(), "redis://user:hunter2@127.0.0.1:1/0?dial_timeout=50ms&max_retries=-1")
	require.Error(t, err, "nothing listens on port 1")
	assert.NotContains(t, err.Error(), "hunter2", "errors never carry the password")
}

func TestPublishWhileServerDownReturnsError(t *testing.T) {
	srv := redistest.Start(t)
	b, _, _ := openBus(t, srv.URL(), nil)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.Publish(ctx, uniqueTopic(t), &bus.Message{Payload: []byte("x")})
	require.Error(t, err, "publish must fail while the server is down")
	assert.False(t, errors.Is(err, bus.ErrClosed), "the failure is not ErrClosed")
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	tests := []struct {
		name string
		opts redisstream.Options
	}{
		{name: "prefix with brace", opts: redisstream.Options{Prefix: "a{b"}},
		{name: "block zero-ish", opts: redisstream.Options{Block: time.Microsecond}},
		{name: "negative maxlen", opts: redisstream.Options{MaxLen: -1}},
		{name: "maxage without age", opts: redisstream.Options{Retention: redisstream.RetainMaxAge}},
		{name: "short trim interval", opts: redisstream.Options{TrimInterval: time.Millisecond}},
		{name: "read linger over block", opts: redisstream.Options{Block: 5 * time.Millisecond, ReadLinger: 6 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redisstream.New(client, &tt.opts)
			require.ErrorIs(t, err, redisstream.ErrInvalidOption)
		})
	}
}
