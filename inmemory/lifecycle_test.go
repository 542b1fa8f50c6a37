package inmemory_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

func TestReceiveWaitsForAPublish(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "wait", "g")
	type result struct {
		msgs []*backend.Message
		err  error
	}
	done := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		m, err := s.Receive(context.Background(), 10)
		done <- result{m, err}
	}()
	<-started
	time.Sleep(20 * time.Millisecond) // let Receive block; the assertion below does not depend on it
	publish(t, be, "wait", "m", 1)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Len(t, r.msgs, 1, "the published message")
	case <-time.After(3 * time.Second):
		t.Fatal("Receive did not return")
	}
}

func TestReceiveReturnsEmptyAfterAboutASecond(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "idle", "g")
	start := time.Now()
	m, err := s.Receive(context.Background(), 10)
	took := time.Since(start)
	require.NoError(t, err, "an idle Receive is not an error")
	assert.Empty(t, m)
	assert.GreaterOrEqual(t, took, 900*time.Millisecond, "blocks up to about a second")
}

func TestCloseUnblocksReceive(t *testing.T) {
	tests := []struct {
		name  string
		close func(be *inmemory.Backend, s backend.Subscription) error
	}{
		{name: "subscription", close: func(_ *inmemory.Backend, s backend.Subscription) error { return s.Close() }},
		{name: "backend", close: func(be *inmemory.Backend, _ backend.Subscription) error { return be.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, nil)
			s := subscribe(t, be, "close", "g")
			done := make(chan error, 1)
			go func() {
				_, err := s.Receive(context.Background(), 1)
				done <- err
			}()
			require.NoError(t, tt.close(be, s))
			select {
			case err := <-done:
				require.ErrorIs(t, err, backend.ErrClosed, "blocked Receive returns ErrClosed")
			case <-time.After(10 * time.Second):
				t.Fatal("Receive did not return after Close")
			}
			_, err := s.Receive(context.Background(), 1)
			require.ErrorIs(t, err, backend.ErrClosed, "later Receive")
		})
	}
}

func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "after", "g")
	publish(t, be, "after", "m", 1)
	got := receiveN(t, s, 1, time.Second)[0]
	require.NoError(t, be.Close())
	ctx := context.Background()
	checks := map[string]error{
		"publish":     be.Publish(ctx, "after", msgs("x", 1)),
		"ack":         s.Ack(ctx, []backend.AckID{got.AckID}),
		"nack":        s.Nack(ctx, got.AckID, 0),
		"extend":      s.(backend.Extender).Extend(ctx, got.AckID),
		"dead-letter": s.(backend.DeadLetterer).DeadLetter(ctx, got.AckID, "after.dlq", got),
		"close again": be.Close(),
	}
	_, err := be.Subscribe(ctx, "after", backend.SubscribeConfig{Group: "g", AckTimeout: time.Second})
	checks["subscribe"] = err
	for name, err := range checks {
		assert.ErrorIs(t, err, backend.ErrClosed, name)
	}
	assert.NoError(t, s.Close(), "closing a subscription is idempotent")
}

func TestUnsettledEntriesSurviveMemberClose(t *testing.T) {
	be := newBackend(t, nil)
	s1 := subscribe(t, be, "leave", "g", ackTimeout(50*time.Millisecond))
	publish(t, be, "leave", "m", 3)
	receiveN(t, s1, 3, time.Second)
	require.NoError(t, s1.Close())
	s2 := subscribe(t, be, "leave", "g")
	got := receiveN(t, s2, 3, 2*time.Second)
	assert.ElementsMatch(t, seq("m", 3), ids(got), "redelivered to the next member after the lease")
	for _, m := range got {
		assert.Equal(t, 2, m.Attempt)
	}
}

func TestNamedBrokerIsSharedAndFreedWithItsLastUser(t *testing.T) {
	open := func() *inmemory.Backend {
		u, err := url.Parse("mem://shared-test")
		require.NoError(t, err)
		b, err := inmemory.OpenURL(u)
		require.NoError(t, err, "open named broker")
		return b.(*inmemory.Backend)
	}
	a, b := open(), open()
	s := subscribe(t, b, "named", "g")
	publish(t, a, "named", "m", 1)
	assert.Equal(t, "m0", receiveN(t, s, 1, time.Second)[0].ID, "a publish on one handle reaches the other")

	require.NoError(t, a.Close())
	publish(t, b, "named", "n", 1)
	assert.Equal(t, "n0", receiveN(t, s, 1, time.Second)[0].ID, "the broker lives while one user remains")
	require.NoError(t, s.Close())
	require.NoError(t, b.Close())

	c := open()
	defer c.Close()
	_, ok := c.Stats("named")
	assert.False(t, ok, "reopened after the last close: a fresh broker")

	other, err := inmemory.OpenURL(&url.URL{Scheme: "mem", Host: "another"})
	require.NoError(t, err)
	defer other.Close()
	publish(t, c, "iso", "m", 1)
	_, ok = other.(*inmemory.Backend).Stats("iso")
	assert.False(t, ok, "different names are different brokers")
}

func TestPrivateBrokersAreIsolated(t *testing.T) {
	a, err := inmemory.OpenURL(&url.URL{Scheme: "mem"})
	require.NoError(t, err)
	defer a.Close()
	b := newBackend(t, nil)
	publish(t, a, "iso", "m", 1)
	_, ok := b.Stats("iso")
	assert.False(t, ok, "mem:// is private")
}

func TestOpenURL(t *testing.T) {
	tests := []struct {
		url     string
		wantErr bool
		want    inmemory.Options
	}{
		{url: "mem://", want: inmemory.Options{MaxBacklog: inmemory.DefaultMaxBacklog, MaxBacklogBytes: inmemory.DefaultMaxBacklogBytes, DedupWindow: inmemory.DefaultDedupWindow}},
		{url: "mem://?max_backlog=10&backlog_policy=error&max_backlog_bytes=4096", want: inmemory.Options{MaxBacklog: 10, MaxBacklogBytes: 4096, BacklogPolicy: inmemory.BacklogError, DedupWindow: inmemory.DefaultDedupWindow}},
		{url: "mem://?backlog_policy=wait", want: inmemory.Options{MaxBacklog: inmemory.DefaultMaxBacklog, MaxBacklogBytes: inmemory.DefaultMaxBacklogBytes, BacklogPolicy: inmemory.BacklogWait, DedupWindow: inmemory.DefaultDedupWindow}},
		{url: "mem://url-test?max_backlog=7", want: inmemory.Options{MaxBacklog: 7, MaxBacklogBytes: inmemory.DefaultMaxBacklogBytes, DedupWindow: inmemory.DefaultDedupWindow}},
		{url: "mem://?dedup_window=0", want: inmemory.Options{MaxBacklog: inmemory.DefaultMaxBacklog, MaxBacklogBytes: inmemory.DefaultMaxBacklogBytes, DedupWindow: -1}},
		{url: "mem://?dedup_window=30s", want: inmemory.Options{MaxBacklog: inmemory.DefaultMaxBacklog, MaxBacklogBytes: inmemory.DefaultMaxBacklogBytes, DedupWindow: 30 * time.Second}},
		{url: "mem://?dedup_window=-1s", wantErr: true},
		{url: "mem://?max_backlog_bytes=0", wantErr: true},
		{url: "mem://?max_backlog_bytes=1e6", wantErr: true},
		{url: "mem://?unknown=1", wantErr: true},
		{url: "mem://?max_backlog=0", wantErr: true},
		{url: "mem://?max_backlog=-3", wantErr: true},
		{url: "mem://?max_backlog=ten", wantErr: true},
		{url: "mem://?max_backlog=1&max_backlog=2", wantErr: true},
		{url: "mem://?backlog_policy=drop", wantErr: true},
		{url: "mem://name/path", wantErr: true},
		{url: "mem://user:secret@name", wantErr: true},
		{url: "mem://secret@name", wantErr: true},
		{url: "mem:opaque", wantErr: true},
		{url: "redis://localhost", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			be, err := inmemory.OpenURL(u)
			if tt.wantErr {
				require.ErrorIs(t, err, inmemory.ErrInvalidOption)
				assert.NotContains(t, err.Error(), "secret", "credentials are redacted")
				return
			}
			require.NoError(t, err)
			defer be.Close()
			assert.Equal(t, tt.want, be.(*inmemory.Backend).Options())
		})
	}
}

func TestNamedBrokerRejectsConflictingOptions(t *testing.T) {
	first, err := inmemory.OpenURL(&url.URL{Scheme: "mem", Host: "conflict", RawQuery: "max_backlog=5"})
	require.NoError(t, err)
	defer first.Close()
	_, err = inmemory.OpenURL(&url.URL{Scheme: "mem", Host: "conflict", RawQuery: "max_backlog=6"})
	require.ErrorIs(t, err, inmemory.ErrInvalidOption, "different options for an open named broker")
	same, err := inmemory.OpenURL(&url.URL{Scheme: "mem", Host: "conflict"})
	require.NoError(t, err, "no parameters joins with the broker's options")
	defer same.Close()
	assert.Equal(t, 5, same.(*inmemory.Backend).Options().MaxBacklog)
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts *inmemory.Options
		ok   bool
	}{
		{name: "nil is defaults", opts: nil, ok: true},
		{name: "zero is defaults", opts: &inmemory.Options{}, ok: true},
		{name: "negative backlog", opts: &inmemory.Options{MaxBacklog: -1}},
		{name: "negative backlog bytes", opts: &inmemory.Options{MaxBacklogBytes: -1}},
		{name: "unknown policy", opts: &inmemory.Options{BacklogPolicy: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be, err := inmemory.New(tt.opts)
			if !tt.ok {
				require.ErrorIs(t, err, inmemory.ErrInvalidOption)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, inmemory.DefaultMaxBacklog, be.Options().MaxBacklog)
			assert.Equal(t, int64(inmemory.DefaultMaxBacklogBytes), be.Options().MaxBacklogBytes)
			require.NoError(t, be.Close())
		})
	}
}

func TestSubscribeValidatesConfig(t *testing.T) {
	be := newBackend(t, nil)
	_, err := be.Subscribe(context.Background(), "cfg", backend.SubscribeConfig{Group: "", AckTimeout: time.Second})
	assert.ErrorIs(t, err, inmemory.ErrInvalidOption, "empty group")
	_, err = be.Subscribe(context.Background(), "cfg", backend.SubscribeConfig{Group: "g"})
	assert.ErrorIs(t, err, inmemory.ErrInvalidOption, "zero ack timeout")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = be.Subscribe(ctx, "cfg", backend.SubscribeConfig{Group: "g", AckTimeout: time.Second})
	assert.True(t, errors.Is(err, context.Canceled), "cancelled ctx")
}
