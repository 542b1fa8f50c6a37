package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener holds one connection that LISTENs on the backend's channel and
// wakes the subscriptions of the topic each notification names. When the
// connection fails it reconnects with backoff and wakes every
// subscription, since notifications may have been lost meanwhile; the
// subscriptions' polls cover the gap.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string

	ready     chan struct{} // closed once the first LISTEN succeeded
	readyOnce sync.Once

	mu    sync.Mutex
	wakes map[string]map[chan struct{}]struct{}
}

func newListener(cfg *pgx.ConnConfig, channel string) *listener {
	return &listener{cfg: cfg, channel: channel, ready: make(chan struct{}), wakes: map[string]map[chan struct{}]struct{}{}}
}

// listenWait bounds how long Subscribe waits for the listener's first
// LISTEN; after it the subscription starts and polls until the listener
// connects.
const listenWait = 2 * time.Second

// waitReady waits until the listener listens, ctx ends or listenWait
// passes, so that a new subscription does not miss the notifications
// of what is published right after it starts.
func (l *listener) waitReady(ctx context.Context) {
	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-l.ready:
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l *listener) add(topic string, wake chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.wakes[topic]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		l.wakes[topic] = m
	}
	m[wake] = struct{}{}
}

func (l *listener) remove(topic string, wake chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.wakes[topic], wake)
	if len(l.wakes[topic]) == 0 {
		delete(l.wakes, topic)
	}
}

// wakeTopic wakes every subscription of topic in this process.
func (l *listener) wakeTopic(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.wakes[topic] {
		wake(w)
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.wakes {
		for w := range m {
			wake(w)
		}
	}
}

// wake signals w without blocking: one pending signal is enough.
func wake(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// run listens until life ends.
func (l *listener) run(life context.Context) {
	backoff := 50 * time.Millisecond
	for life.Err() == nil {
		start := time.Now()
		l.session(life)
		if time.Since(start) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// session connects, listens and dispatches until the connection fails or
// life ends.
func (l *listener) session(life context.Context) {
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	cancel()
	if err != nil {
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}()
	ctx, cancel = context.WithTimeout(life, 10*time.Second)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize())
	cancel()
	if err != nil {
		return
	}
	// Whatever was published while no connection listened is found by
	// the next fetch.
	l.readyOnce.Do(func() { close(l.ready) })
	l.wakeAll()
	for {
		n, err := conn.WaitForNotification(life)
		if err != nil {
			return
		}
		l.wakeTopic(n.Payload)
	}
}
