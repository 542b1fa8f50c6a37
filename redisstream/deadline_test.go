package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

// holeProxy forwards loopback TCP to a server until blackhole is called;
// from then on it swallows every byte in both directions without closing
// anything, like a link that went dead.
type holeProxy struct {
	ln     net.Listener
	target string
	hole   atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	p := &holeProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holeProxy) addr() string { return p.ln.Addr().String() }

func (p *holeProxy) blackhole() { p.hole.Store(true) }

func (p *holeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.hole.Load() {
			// A dead link answers nothing: hold the connection open.
			p.track(c)
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c)
		p.track(u)
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *holeProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst until src fails; in a blackhole it reads and
// drops.
func (p *holeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.hole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

// close ends every connection, so clients blocked on the dead link fail
// at once, and waits for the proxy's goroutines.
func (p *holeProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// holeClient returns a client through a fresh proxy in front of a private
// server, with or without ContextTimeoutEnabled.
func holeClient(t *testing.T, ctxTimeouts bool) (*holeProxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := startHoleProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: ctxTimeouts, Protocol: 2})
	t.Cleanup(func() {
		p.close() // first: Close then fails fast instead of waiting out the dead link
		_ = c.Close()
	})
	return p, c
}

// holeBus returns a bus over a backend on c; when the test ends the proxy
// is closed first, so the bus's Close does not wait out the dead link.
func holeBus(t *testing.T, p *holeProxy, c *redis.Client, opts ...bus.Option) *bus.Bus {
	t.Helper()
	be, err := redisstream.New(c, nil)
	require.NoError(t, err)
	b := bus.New(be, opts...)
	t.Cleanup(func() {
		p.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

// within runs f under a watchdog and returns how long it took.
func within(t *testing.T, watchdog time.Duration, what string, f func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		d := time.Since(start)
		t.Logf("%s took %v", what, d.Round(time.Millisecond))
		return d
	case <-time.After(watchdog):
		t.Fatalf("%s did not return within %v", what, watchdog)
		return 0
	}
}

func TestPublishOverBlackholeReturnsWithinCtxDeadline(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		name := "client without ContextTimeoutEnabled"
		if ctxTimeouts {
			name = "client with ContextTimeoutEnabled"
		}
		t.Run(name, func(t *testing.T) {
			p, c := holeClient(t, ctxTimeouts)
			b := holeBus(t, p, c)
			topic := uniqueTopic(t)
			require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("before")}), "publish over a live link")

			p.blackhole()
			var perr error
			took := within(t, 10*time.Second, "Publish over a blackhole", func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				perr = b.Publish(ctx, topic, &bus.Message{Payload: []byte("lost")})
			})
			require.Error(t, perr, "Publish over a dead link fails")
			assert.ErrorIs(t, perr, context.DeadlineExceeded, "the error says the ctx ran out")
			assert.Less(t, took, 200*time.Millisecond+faultsuite.Grace, "Publish with a 200ms ctx returns by its deadline")
		})
	}
}

func TestSubscribeOverBlackholeReturnsWithinCtxDeadline(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ctx-timeouts-%v", ctxTimeouts), func(t *testing.T) {
			p, c := holeClient(t, ctxTimeouts)
			b := holeBus(t, p, c)
			require.NoError(t, c.Ping(context.Background()).Err(), "ping over a live link")

			p.blackhole()
			var serr error
			took := within(t, 10*time.Second, "Subscribe over a blackhole", func() {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				_, serr = b.Subscribe(ctx, uniqueTopic(t), func(context.Context, *bus.Delivery) error { return nil })
			})
			require.ErrorIs(t, serr, context.DeadlineExceeded, "Subscribe over a dead link fails with the ctx error")
			assert.Less(t, took, 500*time.Millisecond+faultsuite.Grace, "Subscribe with a 500ms ctx returns by its deadline")
		})
	}
}

func TestSubscriptionCloseOverBlackholeReturnsWithinCtx(t *testing.T) {
	tests := []struct {
		name string
		// waitReadFailure: close only after a read timed out on the dead
		// link, so the fetch loop is opening a new read connection.
		waitReadFailure bool
	}{
		{name: "read blocked"},
		{name: "reconnecting after a failed read", waitReadFailure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := holeClient(t, true)
			rec := &recorder{}
			b := holeBus(t, p, c, bus.WithObserver(rec))
			topic := uniqueTopic(t)
			handled := make(chan struct{}, 1)
			sub, err := b.Subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error {
				select {
				case handled <- struct{}{}:
				default:
				}
				return nil
			}, bus.WithGroup("g"), bus.WithAckTimeout(time.Second))
			require.NoError(t, err)
			require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("x")}))
			select {
			case <-handled:
			case <-time.After(10 * time.Second):
				t.Fatal("the message was not handled over a live link")
			}
			// Let the ack flush over the live link, so only the fetch
			// loop and the close itself meet the dead link.
			require.Eventually(t, func() bool {
				pe, err := c.XPending(context.Background(), "bus:{"+topic+"}", "g").Result()
				return err == nil && pe.Count == 0
			}, 10*time.Second, 10*time.Millisecond, "the ack reaches the server")

			p.blackhole()
			if tt.waitReadFailure {
				require.Eventually(t, func() bool { return rec.count(observer.ScopeReceive, "") > 0 }, 20*time.Second, 10*time.Millisecond,
					"a read on the dead link fails and is reported")
			}
			took := within(t, 10*time.Second, "Subscription.Close over a blackhole", func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = sub.Close(ctx)
			})
			assert.Less(t, took, time.Second+faultsuite.Grace, "Close with a 1s ctx returns by its deadline")
		})
	}
}

func TestSubscriptionCloseWithAcksPendingOverBlackholeReturnsWithinCtx(t *testing.T) {
	p, c := holeClient(t, true)
	b := holeBus(t, p, c)
	topic := uniqueTopic(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan struct{}, 1)
	sub, err := b.Subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error {
		started <- struct{}{}
		<-release
		returned <- struct{}{}
		return nil // the ack meets the dead link
	}, bus.WithGroup("g"), bus.WithAckTimeout(time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("x")}))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not delivered over a live link")
	}
	p.blackhole()
	close(release)
	<-returned
	took := within(t, 10*time.Second, "Subscription.Close with acks pending over a blackhole", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = sub.Close(ctx)
	})
	assert.Less(t, took, time.Second+faultsuite.Grace, "Close with a 1s ctx returns by its deadline")
}

func TestBackendCallsOverBlackholeReturnWithinCtxDeadline(t *testing.T) {
	p, c := holeClient(t, false)
	b := holeBus(t, p, c)
	topic := uniqueTopic(t)
	acks := make(chan *bus.Delivery, 1)
	_, err := b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		acks <- d
		return nil
	}, bus.WithGroup("g"), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("x")}))
	var d *bus.Delivery
	select {
	case d = <-acks:
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not delivered over a live link")
	}

	p.blackhole()
	for _, tt := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Extend", d.Extend},
		{"Nack", func(ctx context.Context) error { return d.Nack(ctx, time.Hour) }},
	} {
		var cerr error
		took := within(t, 10*time.Second, tt.name+" over a blackhole", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			cerr = tt.call(ctx)
		})
		assert.Error(t, cerr, "%s over a dead link fails", tt.name)
		assert.Less(t, took, 200*time.Millisecond+faultsuite.Grace, "%s with a 200ms ctx returns by its deadline", tt.name)
	}
}

// TestBusyReceiveOverBlackholeReturnsSoonAfterCancel: a read that follows
// one which found entries runs on the caller's goroutine with a short
// BLOCK; over a dead link it still returns soon after its ctx is
// cancelled, whatever the link.
func TestBusyReceiveOverBlackholeReturnsSoonAfterCancel(t *testing.T) {
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			p, c := holeClient(t, ctxTimeouts)
			be, err := redisstream.New(c, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = be.Close() })
			ctx := context.Background()
			topic := uniqueTopic(t)
			sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 10, MaxDeliveries: 3, Observer: observer.Nop()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Close() })
			for i := range 2 {
				require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: fmt.Sprint(i), Payload: []byte("x"), PublishedAt: time.Now()}}))
			}
			got := 0
			for got == 0 {
				msgs, err := sub.Receive(ctx, 1)
				require.NoError(t, err)
				got += len(msgs)
			}
			p.blackhole()
			rctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			var rerr error
			took := within(t, 10*time.Second, "a busy Receive over a blackhole", func() {
				// The entry left may come back (already read from the
				// buffer before the hole); keep reading until the error.
				for rerr == nil {
					_, rerr = sub.Receive(rctx, 1)
				}
			})
			assert.ErrorIs(t, rerr, context.Canceled)
			assert.Less(t, took, 700*time.Millisecond, "Receive returns within 600ms of the cancel")
		})
	}
}

// TestCancelledPublishOverBlackholeReturnsWithinSocketTimeouts: a Publish
// whose ctx has no deadline runs on the caller's goroutine when the client
// bounds its socket I/O by timeouts; cancelled over a dead link it returns
// the cancel within those timeouts. A client without socket timeouts keeps
// the goroutine, and such a Publish returns at once.
func TestCancelledPublishOverBlackholeReturnsWithinSocketTimeouts(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration // client read and write timeout; -1: none
		within  time.Duration // after the cancel
	}{
		{"client with 400ms socket timeouts", 400 * time.Millisecond, 1500 * time.Millisecond},
		{"client without socket timeouts", -1, 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := startHoleProxy(t, srv.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true, Protocol: 2,
				ReadTimeout: tt.timeout, WriteTimeout: tt.timeout})
			t.Cleanup(func() {
				p.close()
				_ = c.Close()
			})
			be, err := redisstream.New(c, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = be.Close() })
			topic := uniqueTopic(t)
			msg := func(id string) []*backend.Message {
				return []*backend.Message{{ID: id, Payload: []byte(id), PublishedAt: time.Now()}}
			}
			live, stop := context.WithCancel(context.Background())
			require.NoError(t, be.Publish(live, topic, msg("before")), "publish over a live link with a cancel-only ctx")
			stop()

			p.blackhole()
			ctx, cancel := context.WithCancel(context.Background())
			var cancelled time.Time
			timer := time.AfterFunc(100*time.Millisecond, func() {
				cancelled = time.Now()
				cancel()
			})
			defer timer.Stop()
			var perr error
			within(t, 10*time.Second, "a cancelled Publish over a blackhole", func() {
				perr = be.Publish(ctx, topic, msg("lost"))
			})
			require.ErrorIs(t, perr, context.Canceled, "the error says the ctx was cancelled")
			require.False(t, cancelled.IsZero(), "Publish returned before its ctx was cancelled")
			assert.Less(t, time.Since(cancelled), tt.within, "Publish returns within %v of the cancel", tt.within)
		})
	}
}

// TestPublishWithoutDeadlineOnAPausedServerReturnsWithinTheClientTimeouts:
// a Publish whose ctx has no deadline (context.Background()) returns
// within the client's write timeout plus its read timeout over a frozen
// server (SIGSTOP), one message or a batch, though go-redis retries a
// timed-out command on a new connection whose handshake waits too; with
// go-redis's default timeouts that is the 10 s docs/backends.md gives.
// Every Publish that returned nil is stored once the server resumes.
func TestPublishWithoutDeadlineOnAPausedServerReturnsWithinTheClientTimeouts(t *testing.T) {
	tests := []struct {
		name  string
		query string
		bound time.Duration
		batch int
	}{
		{"one message with 300ms timeouts", "?read_timeout=300ms&write_timeout=300ms", 600 * time.Millisecond, 1},
		{"batch with 300ms timeouts", "?read_timeout=300ms&write_timeout=300ms", 600 * time.Millisecond, 8},
		{"batch with the default timeouts", "", 10 * time.Second, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			b, err := bus.Open(context.Background(), srv.URL()+tt.query)
			require.NoError(t, err)
			t.Cleanup(func() {
				srv.Resume()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = b.Close(ctx)
			})
			topic := uniqueTopic(t)
			var (
				mu     sync.Mutex
				stored []string // IDs whose Publish returned nil
			)
			batch := func(n int) []*bus.Message {
				msgs := make([]*bus.Message, tt.batch)
				for i := range msgs {
					msgs[i] = &bus.Message{ID: fmt.Sprintf("m-%d-%d", n, i), Payload: []byte("x")}
				}
				return msgs
			}
			publish := func(n int) error {
				msgs := batch(n)
				err := b.Publish(context.Background(), topic, msgs...)
				if err == nil {
					mu.Lock()
					for _, m := range msgs {
						stored = append(stored, m.ID)
					}
					mu.Unlock()
				}
				return err
			}
			for n := range 3 {
				require.NoError(t, publish(n), "publish to a running server")
			}

			srv.Pause()
			var perr error
			took := within(t, tt.bound+20*time.Second, "a Publish without deadline on a paused server", func() {
				perr = publish(3)
			})
			require.Error(t, perr, "nothing answers a Publish on a paused server")
			assert.ErrorIs(t, perr, context.DeadlineExceeded, "the error says the bound ran out")
			assert.ErrorContains(t, perr, "write timeout plus its read timeout", "the error names the bound")
			assert.Less(t, took, tt.bound+time.Second, "Publish returns within the client's write plus read timeout (%v), with slack", tt.bound)
			srv.Resume()

			for n := 4; n < 7; n++ {
				require.NoError(t, publish(n), "publish after the server resumed")
			}
			got := map[string]bool{}
			sub, err := b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
				mu.Lock()
				got[d.ID] = true
				mu.Unlock()
				return nil
			}, bus.WithGroup("check"), bus.WithStartFrom(backend.StartOldest))
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Close(context.Background()) })
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range stored {
					if !got[id] {
						return false
					}
				}
				return true
			}, 20*time.Second, 20*time.Millisecond, "every message whose Publish returned nil is stored")
		})
	}
}
