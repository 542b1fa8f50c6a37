package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// link is one AMQP connection, dialed again when it has died (on the next
// call that needs it). Its methods are safe for concurrent use.
type link struct {
	b    *Backend
	name string // "publish" or "consume", for the connection name

	mu       sync.Mutex
	conn     *amqp.Connection
	sock     *socket
	closed   bool
	failures int       // dials failed in a row
	retryAt  time.Time // no dial before it after a failed one
	lastErr  error     // of the last failed dial
}

// Dials after a failed one wait a backoff: redialBase doubled for each
// failure in a row, at most redialMax.
const (
	redialBase = 25 * time.Millisecond
	redialMax  = time.Second
)

// get returns the live connection, dialing a new one when there is none.
// The dial is bounded by ctx and by Options.DialTimeout. After a failed
// dial the next waits its backoff; a call whose ctx ends before the
// backoff does returns the last dial's error at once.
func (l *link) get(ctx context.Context) (*amqp.Connection, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, fmt.Errorf("rabbitmq: %w", backend.ErrClosed)
		}
		if l.conn != nil && !l.conn.IsClosed() {
			conn := l.conn
			l.mu.Unlock()
			return conn, nil
		}
		if wait := time.Until(l.retryAt); wait > 0 {
			err := l.lastErr
			l.mu.Unlock()
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return nil, err
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		conn, err := l.dialLocked(ctx)
		l.mu.Unlock()
		return conn, err
	}
}

// ctxEnded returns ctx's error once ctx has ended or its deadline has
// passed (a socket deadline set from ctx's may fire before ctx's own
// timer does), and nil before.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// dialLocked dials a new connection in place of the dead one and keeps
// the backoff.
func (l *link) dialLocked(ctx context.Context) (*amqp.Connection, error) {
	if l.sock != nil {
		_ = l.sock.Close()
	}
	conn, sock, err := l.b.dial(ctx, l.name)
	if err != nil {
		if cerr := ctxEnded(ctx); cerr != nil {
			// The caller's deadline ended the dial, not the broker: no
			// backoff, and the error says so.
			return nil, fmt.Errorf("rabbitmq: dial: %w (%v)", cerr, err)
		}
		l.failures++
		l.retryAt = time.Now().Add(min(redialBase<<min(l.failures-1, 10), redialMax))
		l.lastErr = err
		return nil, err
	}
	l.conn, l.sock = conn, sock
	l.failures, l.retryAt, l.lastErr = 0, time.Time{}, nil
	return conn, nil
}

// cork corks the socket of the live connection, when there is one, and
// returns what lifts the cork (see socket).
func (l *link) cork() (uncork func()) {
	l.mu.Lock()
	sock := l.sock
	l.mu.Unlock()
	if sock == nil {
		return func() {}
	}
	sock.cork()
	return sock.uncork
}

// channel opens a channel on the live connection, bounded by ctx: opening
// a channel waits for the broker's reply, which never comes on a dead
// network.
func (l *link) channel(ctx context.Context) (*amqp.Channel, error) {
	_, ch, err := l.channelOn(ctx)
	return ch, err
}

// use runs f on a fresh channel of l, bounded by ctx (see callCtx), and
// closes the channel in the background afterwards: for one-off methods
// whose failure closes their channel. When ctx ends first, use returns
// its error while f may still run: what f writes is the caller's only
// when use returns nil.
func (l *link) use(ctx context.Context, f func(ch *amqp.Channel) error) error {
	ch, err := l.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { go closeChannel(ch, l.b.opts.CloseTimeout) }()
	return callCtx(ctx, ch, func() error { return f(ch) })
}

// channelOn opens a channel as channel does and returns it with the
// connection it is on.
func (l *link) channelOn(ctx context.Context) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := l.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	res := make(chan channelResult, 1)
	go func() {
		ch, err := conn.Channel()
		res <- channelResult{ch, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, nil, fmt.Errorf("rabbitmq: open a channel: %w", r.err)
		}
		guardChannel(r.ch)
		return conn, r.ch, nil
	case <-ctx.Done():
		// The caller goes at once. The connection is shared: the end of
		// one caller's ctx says nothing about the broker, and breaking
		// the connection would give back what every other channel on it
		// holds. The channel is closed when it opens; only a broker that
		// does not answer within Options.DialTimeout counts as gone.
		go l.abandonOpen(conn, res)
		return nil, nil, ctx.Err()
	}
}

// abandonOpen waits for the open of a channel whose caller went (see
// channelOn) and closes the channel. It breaks the connection when the
// broker has not answered within Options.DialTimeout: the network is
// dead, and every call waiting on the connection returns.
func (l *link) abandonOpen(conn *amqp.Connection, res <-chan channelResult) {
	t := time.NewTimer(l.b.opts.DialTimeout)
	defer t.Stop()
	select {
	case r := <-res:
		if r.err == nil {
			closeChannel(r.ch, l.b.opts.CloseTimeout)
		}
		return
	case <-t.C:
	}
	l.breakConn(conn)
	if r := <-res; r.err == nil {
		_ = r.ch.Close()
	}
}

// channelResult is the outcome of opening a channel.
type channelResult struct {
	ch  *amqp.Channel
	err error
}

// breakConn closes the socket of conn when it is still the live one, so
// that every call waiting on it returns and the next call dials again.
func (l *link) breakConn(conn *amqp.Connection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == conn && l.sock != nil {
		_ = l.sock.Close()
	}
}

// close closes the connection, with the AMQP goodbye when it comes within
// the close timeout, and the socket in any case.
func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.conn != nil {
		_ = l.conn.CloseDeadline(time.Now().Add(l.b.opts.CloseTimeout))
		_ = l.sock.Close()
		l.conn = nil
	}
}

// dial opens an AMQP connection to the backend's URL.
func (b *Backend) dial(ctx context.Context, name string) (*amqp.Connection, *socket, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.DialTimeout)
	defer cancel()
	var sock *socket
	cfg := amqp.Config{
		Heartbeat:       b.opts.Heartbeat,
		TLSClientConfig: b.opts.TLS,
		Properties:      amqp.Table{"connection_name": "bus " + name},
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			dl, _ := ctx.Deadline()
			if err := c.SetDeadline(dl); err != nil { // the handshake; amqp091 clears it once open
				_ = c.Close()
				return nil, err
			}
			sock = &socket{Conn: c, writeTimeout: b.opts.WriteTimeout}
			return sock, nil
		},
	}
	type result struct {
		conn *amqp.Connection
		err  error
	}
	res := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(b.url, cfg)
		res <- result{c, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		// The socket's deadline is the ctx's: the handshake ends soon.
		r = <-res
		if r.err == nil {
			_ = r.conn.Close()
		}
		r.err = ctx.Err()
	}
	if r.err != nil {
		host := ""
		if u, err := url.Parse(b.url); err == nil {
			host = u.Host
		}
		return nil, nil, fmt.Errorf("rabbitmq: dial: %w", urlopt.Explain(r.err, "RabbitMQ", host))
	}
	return r.conn, sock, nil
}

// socket is the connection's net.Conn: every write has a deadline, so a
// write on a dead network fails (and closes the connection) instead of
// blocking. The deadline moves only when less than seven eighths of the
// write timeout is left of it, so that a burst of writes does not reset
// the runtime's timer for each: a write waits at most the write timeout,
// and at least seven eighths of it.
//
// amqp091-go flushes every message and every ack to the socket on its
// own. A caller that sends many at once corks the socket (cork, then
// uncork when it has sent them): the writes in between, its own and
// those of any other caller on the connection, are held and go out in
// one write when the last cork is lifted, or at once when corkLimit
// bytes are held. A held write that fails closes the connection, so that
// the client learns of it as of any write that failed.
type socket struct {
	net.Conn
	writeTimeout time.Duration
	deadline     atomic.Int64 // the write deadline this socket set, Unix ns; 0: unknown

	mu    sync.Mutex
	corks int    // callers that corked the socket
	held  []byte // writes held back while corked
	err   error  // of a held write that failed: every later write fails
}

// corkLimit bounds the bytes a corked socket holds.
const corkLimit = 64 << 10

func (s *socket) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if s.corks > 0 && len(s.held)+len(p) <= corkLimit {
		s.held = append(s.held, p...)
		return len(p), nil
	}
	if err := s.flushLocked(); err != nil {
		return 0, err
	}
	return s.writeLocked(p)
}

func (s *socket) writeLocked(p []byte) (int, error) {
	now := time.Now()
	if dl := s.deadline.Load(); dl == 0 || time.Unix(0, dl).Sub(now) < s.writeTimeout-s.writeTimeout/8 {
		next := now.Add(s.writeTimeout)
		if err := s.Conn.SetWriteDeadline(next); err != nil {
			return 0, err
		}
		s.deadline.Store(next.UnixNano())
	}
	return s.Conn.Write(p)
}

// flushLocked writes what the socket holds.
func (s *socket) flushLocked() error {
	if len(s.held) == 0 {
		return nil
	}
	_, err := s.writeLocked(s.held)
	s.held = s.held[:0]
	if err != nil {
		s.err = err
		_ = s.Conn.Close() // the client took the held writes as written
	}
	return err
}

// cork holds the socket's writes until the matching uncork.
func (s *socket) cork() {
	s.mu.Lock()
	s.corks++
	s.mu.Unlock()
}

// uncork lifts one cork and writes what the socket holds: the caller's
// writes are out when it returns.
func (s *socket) uncork() {
	s.mu.Lock()
	s.corks--
	_ = s.flushLocked()
	s.mu.Unlock()
}

// SetDeadline sets the connection's deadlines; the next write sets its
// own again.
func (s *socket) SetDeadline(t time.Time) error {
	s.deadline.Store(0)
	return s.Conn.SetDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline; the next write
// sets its own again.
func (s *socket) SetWriteDeadline(t time.Time) error {
	s.deadline.Store(0)
	return s.Conn.SetWriteDeadline(t)
}

// connClosed reports whether err says that the channel or the connection
// it was sent on is closed: the client's amqp.ErrClosed, or the socket's
// net.ErrClosed. amqp091-go marks a connection closed and then closes
// its socket; a send that found the connection open just before writes
// on the closed socket and gets that write's error as it is (the
// connection is then closed, and the next call dials again).
func connClosed(err error) bool {
	return errors.Is(err, amqp.ErrClosed) || errors.Is(err, net.ErrClosed)
}

// closeChannel closes ch, bounded by timeout: on a dead network the
// broker's close-ok never comes, and the connection's heartbeat or
// Close ends the wait.
func closeChannel(ch *amqp.Channel, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		if v, ok := guards.Load(ch); ok {
			g := v.(*chanGuard)
			g.mu.Lock() // after what is being sent on ch
			g.closing = true
			g.mu.Unlock()
		}
		_ = ch.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// A frame the broker reads on a channel after it answered the channel's
// close ends the whole connection (504 CHANNEL_ERROR, "expected
// 'channel.open'"), and with it what every other channel on it holds.
// One goroutine may close a channel while another still sends on it: a
// method whose caller's ctx ended (callCtx), a settlement that races a
// reset of its member's channel. So every channel a link opens has a
// guard: a send holds it shared (sendOn), closeChannel takes it
// exclusively before channel.close, and a send after that is refused
// without a frame.
type chanGuard struct {
	mu      sync.RWMutex
	closing bool
}

// guards holds the guard of each open channel of the links.
var guards sync.Map // *amqp.Channel -> *chanGuard

// guardChannel gives ch its guard, forgotten once ch is closed.
func guardChannel(ch *amqp.Channel) {
	guards.Store(ch, &chanGuard{})
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for range closed {
		}
		guards.Delete(ch)
	}()
}

// sendOn runs f, which sends on ch, unless ch is being closed: then it
// returns amqp.ErrClosed and sends nothing.
func sendOn(ch *amqp.Channel, f func() error) error {
	v, ok := guards.Load(ch)
	if !ok {
		return f() // closed (the client refuses to send), or unguarded
	}
	g := v.(*chanGuard)
	if !g.mu.TryRLock() {
		return amqp.ErrClosed
	}
	defer g.mu.RUnlock()
	if g.closing {
		return amqp.ErrClosed
	}
	return f()
}

// settle runs f, an ack or a nack of d, as sendOn does on d's channel.
func settle(d *amqp.Delivery, f func() error) error {
	ch, ok := d.Acknowledger.(*amqp.Channel)
	if !ok {
		return f()
	}
	return sendOn(ch, f)
}
