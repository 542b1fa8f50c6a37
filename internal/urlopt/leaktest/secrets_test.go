package leaktest_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	busnats "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/observer"
	_ "github.com/eventbus-go/bus/redisstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakIgnores()...)
}

// sink collects every error, log line and observer event of a case.
type sink struct {
	mu   sync.Mutex
	text []string
	logs bytes.Buffer
}

func (s *sink) add(what string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text = append(s.text, fmt.Sprintf("%s: %v", what, v))
}

func (s *sink) Observe(_ context.Context, e observer.Event) { s.add("event "+e.Scope.String(), e.Err) }

func (s *sink) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{s: s}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct{ s *sink }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.logs.Write(p)
}

func (s *sink) requireNoSecret(t *testing.T, secret string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.text, "the case produced no error or event to check")
	for _, line := range append(s.text, strings.Split(s.logs.String(), "\n")...) {
		require.NotContains(t, line, secret, "a secret leaked")
	}
}

// watchdog fails the test if it is still running after d.
func watchdog(t *testing.T, d time.Duration) func() {
	timer := time.AfterFunc(d, func() { panic(fmt.Sprintf("watchdog: %s still running after %v", t.Name(), d)) })
	return func() { timer.Stop() }
}

func TestNoSecretInErrorsLogsOrEvents(t *testing.T) {
	defer watchdog(t, 3*time.Minute)()
	t.Run("mem", func(t *testing.T) {
		const secret = "m3mS3cretPW"
		s := &sink{}
		for _, raw := range []string{
			"mem://user:" + secret + "@broker?bogus=1",
			"mem://user:" + secret + "@broker?max_backlog=-1",
			"mem://" + secret + "@broker?max_backlog=1&max_backlog=2",
			"mem:user:" + secret + "@broker",
		} {
			_, err := bus.Open(context.Background(), raw)
			require.Error(t, err, raw)
			require.ErrorIs(t, err, bus.ErrInvalidOption, raw)
			s.add("open", err)
		}
		s.requireNoSecret(t, secret)
	})

	t.Run("redis", func(t *testing.T) {
		const secret = "r3disS3cretPW"
		srv := redistest.Start(t, "--requirepass", secret)
		s := &sink{}
		bad := []string{
			"redis://default:wrong" + secret + "x@" + srv.Addr(),
			"redis://default:" + secret + "@" + srv.Addr() + "?pool_size=-1",
			"redis://default:" + secret + "@" + srv.Addr() + "?bogus=1",
			"redis:default:" + secret + "@" + srv.Addr(),
			"redis://default:" + secret + "@",
		}
		for _, raw := range bad {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := bus.Open(ctx, raw)
			cancel()
			require.Error(t, err, "must be refused: %s", strings.ReplaceAll(raw, secret, "<secret>"))
			s.add("open", err)
		}
		s.requireNoSecret(t, secret)
		s.requireNoSecret(t, "wrong"+secret+"x")

		// Disconnect and reconnect: the events and logs of a live bus.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b, err := bus.Open(ctx, "redis://default:"+secret+"@"+srv.Addr(), bus.WithObserver(s), bus.WithLogger(s.logger()))
		require.NoError(t, err)
		got := make(chan struct{}, 16)
		_, err = b.Subscribe(ctx, "secrets", func(context.Context, *bus.Delivery) error {
			got <- struct{}{}
			return nil
		})
		require.NoError(t, err)
		srv.Kill()
		require.Eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.text) > len(bad)
		}, 30*time.Second, 10*time.Millisecond, "the outage is reported")
		srv.Restart()
		require.Eventually(t, func() bool {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			defer pcancel()
			return b.Publish(pctx, "secrets", &bus.Message{Payload: []byte("x")}) == nil
		}, 30*time.Second, 50*time.Millisecond, "publish works again after the restart")
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("no delivery after the reconnect")
		}
		require.NoError(t, b.Close(ctx))
		s.requireNoSecret(t, secret)
	})

	t.Run("nats user and password", func(t *testing.T) {
		const secret = "n4tsUs3rPassw0rd"
		srv := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "Au", secret })
		host := strings.TrimPrefix(srv.URL(), "nats://")
		s := &sink{}
		for _, raw := range []string{
			"nats://Au:wrong" + secret + "x@" + host,
			"nats://Au:" + secret + "@" + host + "?publish_window=0",
			"nats://Au:" + secret + "@" + host + "?prefix=a&prefix=b",
			"nats:Au:" + secret + "@" + host,
			"nats://Au:" + secret + "@",
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := bus.Open(ctx, raw)
			cancel()
			require.Error(t, err, "must be refused")
			s.add("open", err)
		}
		s.requireNoSecret(t, secret)
		s.mu.Lock()
		first := s.text[0]
		s.mu.Unlock()
		require.Contains(t, first, "Authorization Violation", "the server's error text is kept whole, not masked inside words")

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := bus.Open(ctx, "nats://Au:"+secret+"@"+host, bus.WithObserver(s), bus.WithLogger(s.logger()))
		require.NoError(t, err, "the right password opens")
		require.NoError(t, b.Close(ctx))
	})

	t.Run("nats", func(t *testing.T) {
		const secret = "n4tsS3cretTok"
		srv := natstest.Start(t, func(o *server.Options) { o.Authorization = secret })
		host := strings.TrimPrefix(srv.URL(), "nats://")
		s := &sink{}
		for _, raw := range []string{
			"nats://wrong" + secret + "@" + host,
			"nats://" + secret + "@" + host + "?bogus=1",
			"nats://" + secret + "@" + host + "?prefix=a%00b",
			"nats:" + secret + "@" + host,
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := bus.Open(ctx, raw)
			cancel()
			require.Error(t, err, "must be refused")
			s.add("open", err)
		}
		s.requireNoSecret(t, secret)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		be, err := busnats.Connect(ctx, "nats://"+secret+"@"+host, &busnats.Options{Logger: s.logger(), ReconnectWait: 50 * time.Millisecond})
		require.NoError(t, err)
		b := bus.New(be, bus.WithObserver(s), bus.WithLogger(s.logger()))
		got := make(chan struct{}, 16)
		_, err = b.Subscribe(ctx, "secrets", func(context.Context, *bus.Delivery) error {
			got <- struct{}{}
			return nil
		})
		require.NoError(t, err)
		srv.Shutdown()
		require.Eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return strings.Contains(s.logs.String(), "disconnected")
		}, 30*time.Second, 10*time.Millisecond, "the disconnect is logged")
		srv.Restart()
		require.Eventually(t, func() bool {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			defer pcancel()
			return b.Publish(pctx, "secrets", &bus.Message{Payload: []byte("x")}) == nil
		}, 30*time.Second, 50*time.Millisecond, "publish works again after the reconnect")
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("no delivery after the reconnect")
		}
		require.NoError(t, b.Close(ctx))
		s.mu.Lock()
		logs := s.logs.String()
		s.mu.Unlock()
		require.Contains(t, logs, "reconnected", "the reconnect is logged")
		s.requireNoSecret(t, secret)
	})
}
