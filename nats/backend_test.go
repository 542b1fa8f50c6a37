package nats_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/registry"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/observer"
)

func TestSchemesAreRegistered(t *testing.T) {
	for _, s := range []string{"nats", "tls", "nats+tls"} {
		assert.Contains(t, registry.Schemes(), s, "scheme %q registered by the nats package", s)
	}
}

func TestOpenByURLUsesJetStreamOrCore(t *testing.T) {
	srv := natstest.Start(t)
	tests := []struct {
		name  string
		query string
		want  string
		redel bool
	}{
		{name: "default JetStream", query: "", want: "nats", redel: true},
		{name: "core", query: "?jetstream=false", want: "nats-core", redel: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := bus.Open(context.Background(), srv.URL()+tt.query)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close(context.Background())) }()
			assert.Equal(t, tt.want, b.Capabilities().Name)
			assert.Equal(t, tt.redel, b.Capabilities().Redelivery, "Redelivery")
			assert.Equal(t, tt.redel, b.Capabilities().Persistent, "Persistent")
			assert.Equal(t, tt.redel, b.Capabilities().NackDelay, "NackDelay")
			assert.Equal(t, tt.redel, b.Capabilities().StartOldest, "StartOldest")
			assert.Equal(t, tt.redel, b.Capabilities().Extend, "Extend")
			assert.True(t, b.Capabilities().ConsumerGroups, "groups (durable consumers or queue groups)")
			assert.Positive(t, b.Capabilities().MaxPayload, "max payload from the server")
		})
	}
}

// TestPayloadLimitIsTheServersLessHeaderRoom: with nats-server's default
// max_payload (1 MiB), the bus takes payloads up to 983,040 bytes (64 KiB
// kept for headers), the figure docs/backends.md gives, and refuses a
// larger one before any I/O naming the server's max_payload as the limit
// to raise, however high WithMaxPayload asked; a server configured with
// a larger max_payload takes larger payloads.
func TestPayloadLimitIsTheServersLessHeaderRoom(t *testing.T) {
	tests := []struct {
		name       string
		maxPayload int32 // the server's; 0: its default
		want       int
	}{
		{"default max_payload", 0, 983040},
		{"max_payload 8 MiB", 8 << 20, 8<<20 - 64<<10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.Start(t, func(o *server.Options) {
				if tt.maxPayload > 0 {
					o.MaxPayload = tt.maxPayload
				}
			})
			b, err := bus.Open(context.Background(), srv.URL(), bus.WithMaxPayload(64<<20))
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close(context.Background())) }()
			assert.Equal(t, tt.want, b.MaxPayload(), "the server's max_payload less 64 KiB, whatever WithMaxPayload asked")
			err = b.Publish(context.Background(), "big", &bus.Message{Payload: make([]byte, b.MaxPayload()+1)})
			require.ErrorIs(t, err, bus.ErrPayloadTooLarge)
			assert.ErrorContains(t, err, "the NATS server's max_payload", "the error names the limit that refused the payload")
			assert.ErrorContains(t, err, "raise max_payload in the server's configuration", "and how to raise it")
			assert.ErrorContains(t, err, "bus.WithMaxPayload(67108864) cannot raise it", "and that the bus's option cannot")
		})
	}
}

func TestCredentialsInURLAreRedactedInErrors(t *testing.T) {
	srv := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "alice", "s3cret-pw" })
	host := strings.TrimPrefix(srv.URL(), "nats://")

	b, err := bus.Open(context.Background(), "nats://alice:s3cret-pw@"+host)
	require.NoError(t, err, "user and password in the URL")
	require.NoError(t, b.Close(context.Background()))

	_, err = bus.Open(context.Background(), "nats://alice:wrong-pw@"+host)
	require.Error(t, err, "a wrong password must fail")
	assert.NotContains(t, err.Error(), "wrong-pw", "errors must not show the password")
}

func TestTokenInURL(t *testing.T) {
	srv := natstest.Start(t, func(o *server.Options) { o.Authorization = "tok-123" })
	host := strings.TrimPrefix(srv.URL(), "nats://")
	b, err := bus.Open(context.Background(), "nats://tok-123@"+host)
	require.NoError(t, err, "token in the URL")
	require.NoError(t, b.Close(context.Background()))
	_, err = busnats.Connect(context.Background(), "nats://bad-token@"+host, nil)
	require.Error(t, err, "a wrong token must fail")
	assert.NotContains(t, err.Error(), "bad-token", "errors must not show the token")
}

func TestNKeySeedFileAuthenticates(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	srv := natstest.Start(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })

	be, err := busnats.Connect(context.Background(), srv.URL(), &busnats.Options{NKeySeedFile: seedFile})
	require.NoError(t, err, "nkey seed from the options")
	require.NoError(t, be.Close())
	_, err = busnats.Connect(context.Background(), srv.URL(), nil)
	require.Error(t, err, "without the seed the server refuses")
}

func TestPublishRefusesNATSHeadersAndReportsFailedIndexes(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), isolated(t, srv.URL(), busnats.Options{}))
	defer be.Close()
	msgs := []*backend.Message{
		{ID: "a", Payload: []byte("a")},
		{ID: "b", Payload: []byte("b"), Headers: map[string]string{"Nats-Expected-Stream": "X"}},
		{ID: "c", Payload: []byte("c")},
	}
	err := be.Publish(context.Background(), "hdr.guard", msgs)
	var be2 *backend.BatchError
	require.ErrorAs(t, err, &be2, "a partly failed batch is a *backend.BatchError")
	require.Len(t, be2.Failed, 1)
	assert.Equal(t, 1, be2.Failed[0].Index, "the failed index")
	assert.ErrorIs(t, be2.Failed[0].Err, bus.ErrInvalidMessage)

	sub, err := be.Subscribe(context.Background(), "hdr.guard", subCfg(backend.StartOldest, 10))
	require.NoError(t, err)
	defer sub.Close()
	got := receiveN(t, sub, 2)
	assert.ElementsMatch(t, []string{"a", "c"}, ids(got), "the other messages were stored")
}

func subCfg(from backend.StartFrom, maxInFlight int) backend.SubscribeConfig {
	return backend.SubscribeConfig{
		Group: "g", StartFrom: from, AckTimeout: 5 * time.Second, MaxInFlight: maxInFlight,
		MaxDeliveries: 5, Observer: observer.Nop(),
	}
}

func receiveN(t *testing.T, sub backend.Subscription, n int) []*backend.Message {
	t.Helper()
	var got []*backend.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		msgs, err := sub.Receive(context.Background(), n-len(got))
		require.NoError(t, err)
		got = append(got, kept(msgs)...)
	}
	require.Len(t, got, n, "received messages")
	return got
}

// kept copies the messages a Receive returned: the next Receive may reuse
// them (only their AckIDs stay valid until settled).
func kept(msgs []*backend.Message) []*backend.Message {
	out := make([]*backend.Message, len(msgs))
	for i, m := range msgs {
		c := *m
		out[i] = &c
	}
	return out
}

func ids(msgs []*backend.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// TestReceiveNeverTakesMoreThanMax proves there is no prefetch: after
// Receive(5) the server has handed out exactly 5 messages.
func TestReceiveNeverTakesMoreThanMax(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	be := connect(t, srv.URL(), o)
	defer be.Close()
	msgs := make([]*backend.Message, 50)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: string(rune('A'+i%26)) + strings.Repeat("x", i), Payload: []byte("p")}
	}
	require.NoError(t, be.Publish(context.Background(), "no.prefetch", msgs))
	cfg := subCfg(backend.StartOldest, 64)
	sub, err := be.Subscribe(context.Background(), "no.prefetch", cfg)
	require.NoError(t, err)
	defer sub.Close()
	// A Receive returns once it has a message and nothing more has
	// arrived yet (backend.PartialReceiver): the rest of its request is
	// coming, and the next Receive, asking for what is coming, takes it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string // "ID attempt", read before the next Receive reuses the messages
	for len(got) < 5 {
		more, err := sub.Receive(ctx, 5-len(got))
		require.NoError(t, err)
		require.LessOrEqual(t, len(more), 5-len(got), "Receive(%d) with 50 waiting", 5-len(got))
		for _, m := range more {
			got = append(got, fmt.Sprint(m.ID, " ", m.Attempt))
		}
	}
	for i, g := range got {
		assert.Equal(t, fmt.Sprint(msgs[i].ID, " ", 1), g, "in order, first delivery")
	}

	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	cons, err := js.Consumer(context.Background(), o.StreamPrefix+"_no-prefetch", "g")
	require.NoError(t, err)
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, info.NumAckPending, "the server handed out only what Receive asked for")
	assert.Equal(t, cfg.AckTimeout, info.Config.AckWait, "AckWait = ack timeout")
	assert.Equal(t, 2*64+512, info.Config.MaxAckPending, "MaxAckPending from max in flight")
	assert.Greater(t, info.Config.MaxDeliver, cfg.MaxDeliveries, "MaxDeliver is a safety net above the bus's limit")
	assert.Equal(t, jetstream.AckExplicitPolicy, info.Config.AckPolicy)
	assert.Equal(t, "g", info.Config.Durable, "durable consumer per group")
	assert.Equal(t, "no.prefetch", info.Config.Metadata["bus.topic"], "2.10+ servers get consumer metadata")
}

func TestNackDelayExtendAndTermMapToJetStream(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), isolated(t, srv.URL(), busnats.Options{}))
	defer be.Close()
	require.NoError(t, be.Publish(context.Background(), "settle", []*backend.Message{{ID: "m1", Payload: []byte("x"), Key: "k", Headers: map[string]string{"h": "v"}}}))
	sub, err := be.Subscribe(context.Background(), "settle", subCfg(backend.StartOldest, 4))
	require.NoError(t, err)
	defer sub.Close()
	first := receiveN(t, sub, 1)[0]
	assert.Equal(t, "k", first.Key, "key round-trips")
	assert.Equal(t, map[string]string{"h": "v"}, first.Headers, "only user headers come back")
	assert.WithinDuration(t, time.Now(), first.PublishedAt, 10*time.Second, "published at from the stream")

	ext, ok := sub.(backend.Extender)
	require.True(t, ok, "JetStream subscriptions implement Extender")
	require.NoError(t, ext.Extend(context.Background(), first.AckID))

	start := time.Now()
	require.NoError(t, sub.Nack(context.Background(), first.AckID, 300*time.Millisecond))
	again := receiveN(t, sub, 1)[0]
	assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "the server held the nacked message for the delay")
	assert.Equal(t, 2, again.Attempt, "attempt from the delivery count")
	assert.Equal(t, "m1", again.ID)

	dl, ok := sub.(backend.DeadLetterer)
	require.True(t, ok, "JetStream subscriptions implement DeadLetterer")
	cp := &backend.Message{ID: "m1", Payload: again.Payload, Headers: map[string]string{backend.HeaderDeadLetterReason: "bad"}}
	require.NoError(t, dl.DeadLetter(context.Background(), again.AckID, "settle.dlq", cp))
	dsub, err := be.Subscribe(context.Background(), "settle.dlq", subCfg(backend.StartOldest, 4))
	require.NoError(t, err)
	defer dsub.Close()
	dead := receiveN(t, dsub, 1)[0]
	assert.Equal(t, "bad", dead.Headers[backend.HeaderDeadLetterReason], "the dead-letter copy is stored")
	msgs, err := sub.Receive(context.Background(), 4)
	require.NoError(t, err)
	assert.Empty(t, msgs, "a terminated message is not delivered again")
}

func TestDeletedConsumerIsRecreated(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	var mu sync.Mutex
	var reclaims []error
	obs := observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopeReclaim {
			mu.Lock()
			reclaims = append(reclaims, e.Err)
			mu.Unlock()
		}
	})
	be := connect(t, srv.URL(), o)
	b := bus.New(be, bus.WithObserver(obs))
	defer b.Close(context.Background())
	l := newLedger()
	// A long ack timeout: a duplicate here can only be a replay, not an
	// AckWait redelivery.
	_, err := b.Subscribe(context.Background(), "recreate", recordingHandler(l), bus.WithGroup("g"), bus.WithAckTimeout(30*time.Second))
	require.NoError(t, err)
	publishAll(t, b, l, "recreate", 5)
	waitNoLoss(t, l, 10*time.Second)

	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	require.NoError(t, js.DeleteConsumer(context.Background(), o.StreamPrefix+"_recreate", "g"))
	// Published while the consumer is missing or just re-created: either
	// way the re-created consumer starts after the last message received,
	// so none of these is skipped.
	publishAll(t, b, l, "recreate", 5)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reclaims) > 0
	}, 10*time.Second, 10*time.Millisecond, "the observer hears that the consumer was re-created")
	waitNoLoss(t, l, 10*time.Second)
	c := l.log(t, "recreate")
	assert.Equal(t, 10, c.Acked)
	// Replays are allowed (at-least-once) but should be rare: the
	// re-created consumer starts after the last message received. Under
	// heavy load a few first-batch messages have been seen again; log it.
	if c.Duplicate > 0 {
		mu.Lock()
		t.Logf("re-created consumer replayed %d acked messages; reclaim events: %v", c.Duplicate, reclaims)
		mu.Unlock()
	}
}

func TestCoreModeDoesNotStoreMessages(t *testing.T) {
	srv := natstest.Start(t)
	b := bus.New(connect(t, srv.URL(), isolated(t, srv.URL(), busnats.Options{CoreNATS: true})))
	defer b.Close(context.Background())
	require.NoError(t, b.Publish(context.Background(), "core.t", &bus.Message{Payload: []byte("before")}), "publishing with no subscriber is not an error")
	got := make(chan string, 10)
	_, err := b.Subscribe(context.Background(), "core.t", func(_ context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "core.t", &bus.Message{Payload: []byte("after"), Key: "k"}))
	select {
	case p := <-got:
		assert.Equal(t, "after", p, "only messages published while subscribed arrive")
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery in core mode")
	}
	_, err = b.Subscribe(context.Background(), "core.t", func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup("g2"), bus.WithStartFrom(backend.StartOldest))
	require.ErrorIs(t, err, bus.ErrUnsupported, "core NATS cannot start a group from the oldest message")
}

func TestSharedStreamHoldsEveryTopic(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{StreamMode: busnats.StreamShared})
	be := connect(t, srv.URL(), o)
	defer be.Close()
	for _, topic := range []string{"a.one", "b.two"} {
		// One ID on two topics: deduplication must not span topics.
		require.NoError(t, be.Publish(context.Background(), topic, []*backend.Message{{ID: "same-id", Payload: []byte(topic)}}))
	}
	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), o.StreamName)
	require.NoError(t, err)
	assert.Equal(t, []string{o.SubjectPrefix + ".>"}, st.CachedInfo().Config.Subjects)
	assert.Equal(t, uint64(2), st.CachedInfo().State.Msgs, "both topics in the one stream")
	sub, err := be.Subscribe(context.Background(), "b.two", subCfg(backend.StartOldest, 4))
	require.NoError(t, err)
	defer sub.Close()
	got := receiveN(t, sub, 1)
	assert.Equal(t, "b.two", string(got[0].Payload), "a group sees only its topic")
	assert.Equal(t, "same-id", got[0].ID, "the ID comes back without its topic scope")
}

func TestNewKeepsTheCallersConnection(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := natsgo.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	be, err := busnats.New(nc, nil)
	require.NoError(t, err)
	require.NoError(t, be.Close())
	assert.True(t, nc.IsConnected(), "Close leaves a connection the caller owns open")
	require.ErrorIs(t, be.Close(), backend.ErrClosed, "closing twice")
	_, err = busnats.New(nil, nil)
	require.ErrorIs(t, err, busnats.ErrInvalidOption)
}

// TestNoGoroutineLeakWithEmbeddedServer checks that a bus on this backend
// leaves no goroutine behind, ignoring the embedded server's own.
func TestNoGoroutineLeakWithEmbeddedServer(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	before := clientGoroutines()
	b := bus.New(connect(t, srv.URL(), o))
	l := newLedger()
	_, err := b.Subscribe(context.Background(), "leak", recordingHandler(l), bus.WithGroup("g"))
	require.NoError(t, err)
	publishAll(t, b, l, "leak", 10)
	waitNoLoss(t, l, 10*time.Second)
	require.NoError(t, b.Close(context.Background()))
	var extra []string
	assert.Eventually(t, func() bool {
		extra = nil
		for id, stack := range clientGoroutines() {
			if _, ok := before[id]; !ok {
				extra = append(extra, stack)
			}
		}
		return len(extra) == 0
	}, 5*time.Second, 20*time.Millisecond, "goroutines left behind")
	if t.Failed() {
		t.Logf("goroutines left behind:\n%s", strings.Join(extra, "\n\n"))
	}
}

// clientGoroutines returns the stacks of goroutines, by ID, that are not
// the embedded server's.
func clientGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "nats-server/v2/server") || strings.Contains(g, "clientGoroutines") || strings.Contains(g, "nats_test.TestNoGoroutineLeakWithEmbeddedServer(") {
			continue
		}
		header, _, _ := strings.Cut(g, "\n")
		id := strings.Fields(header)
		if len(id) < 2 {
			continue
		}
		out[id[1]] = g
	}
	return out
}

func TestConnectionEventsAreLoggedWithoutCredentials(t *testing.T) {
	srv := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "bob", "pw-never-logged" })
	host := strings.TrimPrefix(srv.URL(), "nats://")
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	be, err := busnats.Connect(context.Background(), "nats://bob:pw-never-logged@"+host+"?reconnect_wait=20ms", &busnats.Options{Logger: logger})
	require.NoError(t, err)
	defer be.Close()
	srv.Restart()
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "reconnected") }, 10*time.Second, 10*time.Millisecond, "reconnect is logged")
	out := buf.String()
	assert.Contains(t, out, "disconnected", "disconnect is logged")
	assert.Contains(t, out, host, "the server is named")
	assert.NotContains(t, out, "pw-never-logged", "logs never carry the password")
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// DeleteTopic forgets the topic's group locks: a lock whose holder died
// does not hold a group of a topic made again under the same name.
func TestDeleteTopicForgetsItsGroupLocks(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), isolated(t, srv.URL(), busnats.Options{}))
	defer be.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, be.Publish(ctx, "doomed", []*backend.Message{{ID: "a", Payload: []byte("a")}}))
	for _, topic := range []string{"doomed", "kept"} {
		held, _, err := be.LockGroup(ctx, topic, "g", "dead-holder", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the lock is taken, and its holder dies holding it")
	}
	require.NoError(t, be.DeleteTopic(ctx, "doomed"))
	held, takeover, err := be.LockGroup(ctx, "doomed", "g", "new-holder", time.Minute)
	require.NoError(t, err)
	assert.True(t, held, "the deleted topic's lock is gone")
	assert.False(t, takeover, "and so is its last holder")
	held, _, err = be.LockGroup(ctx, "kept", "g", "new-holder", time.Minute)
	require.NoError(t, err)
	assert.False(t, held, "another topic's lock stays")
}

// The default retention (limits) keeps messages every group acked until
// the stream's limits drop them; retention=interest drops them once
// every group acked. The README's backend table says so.
func TestRetentionDefaultKeepsAckedMessages(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		query string
		kept  backend.Figure
	}{
		{"", 20},
		{"?retention=interest", 0},
	}
	for _, tt := range tests {
		t.Run("retention"+tt.query, func(t *testing.T) {
			b, err := bus.Open(ctx, srv.URL()+tt.query, bus.WithObserver(observer.Nop()))
			require.NoError(t, err)
			defer b.Close(ctx)
			topic := "retained" + strings.TrimPrefix(strings.ReplaceAll(tt.query, "=", "-"), "?retention")
			_, err = b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
			require.NoError(t, err)
			for i := range 20 {
				require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte{byte(i)}}))
			}
			require.Eventually(t, func() bool {
				gs, err := b.Groups(ctx, topic)
				return err == nil && len(gs) == 1 && gs[0].Pending == 0 && gs[0].Lag == 0
			}, 10*time.Second, 10*time.Millisecond, "every message handled and acked")
			require.Eventually(t, func() bool {
				ts, err := b.Topics(ctx)
				if err != nil {
					return false
				}
				for _, tp := range ts {
					if tp.Name == topic {
						return tp.Messages == tt.kept
					}
				}
				return false
			}, 10*time.Second, 10*time.Millisecond, "the stream keeps %v acked messages", tt.kept)
		})
	}
}
