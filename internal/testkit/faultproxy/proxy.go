package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the largest chunk read from one side at a time.
	chunkSize = 32 << 10
	// chunkQueue is how many chunks a direction holds before it stops
	// reading.
	chunkQueue = 16
	// dialTimeout bounds the connection to the target.
	dialTimeout = 5 * time.Second
)

// Proxy forwards TCP connections from its listening address to a target
// and injects faults on demand. It is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{}   // closed by Close
	ctx    context.Context // cancelled by Close; bounds dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup

	latency  atomic.Int64 // time.Duration
	accepted atomic.Int64

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}
	open   chan struct{} // closed while forwarding; a fresh one while blackholed
}

// New starts a proxy on 127.0.0.1:0 that forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		target: target,
		ln:     ln,
		done:   make(chan struct{}),
		links:  map[*link]struct{}{},
		open:   closedChan(),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted returns how many client connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Live returns how many connections are open.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Reset closes every live connection with a TCP RST on both sides and
// returns how many it closed. New connections are accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	n := 0
	for _, l := range links {
		if l.abort() {
			n++
		}
	}
	return n
}

// Blackhole stops (on) or resumes (off) forwarding in both directions.
// While on, connections stay open and new ones are accepted, but no byte
// reaches the other side; held bytes are delivered in order when it goes
// off.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open: // forwarding
		if on {
			p.open = make(chan struct{})
		}
	default: // blackholed
		if !on {
			close(p.open)
		}
	}
}

// Blackholed reports whether forwarding is stopped.
func (p *Proxy) Blackholed() bool {
	select {
	case <-p.gate():
		return false
	default:
		return true
	}
}

// Partition blackholes the link for d and then heals it. The returned
// channel is closed once the link is healed (or the proxy closed).
func (p *Proxy) Partition(d time.Duration) <-chan struct{} {
	healed := make(chan struct{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		close(healed)
		return healed
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.Blackhole(true)
	go func() {
		defer p.wg.Done()
		defer close(healed)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.done:
		}
		p.Blackhole(false)
	}()
	return healed
}

// SetLatency delays every chunk, in each direction, by d after it was
// read. 0 removes the delay.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// gate returns a channel that is closed while forwarding is allowed.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// Close stops accepting, closes every connection and waits for every
// goroutine of the proxy. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	close(p.done)
	p.cancel()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faultproxy: close: %w", err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c.(*net.TCPConn))
	}
}

// serve dials the target for client and forwards both ways until either
// side ends or the link is aborted.
func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	var d net.Dialer
	sc, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		abortConn(client)
		return
	}
	l := &link{p: p, client: client, server: sc.(*net.TCPConn), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.abort()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.forward(l.client, l.server) }()
	go func() { defer wg.Done(); l.forward(l.server, l.client) }()
	wg.Wait()
	l.closeBoth()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection: the client side and the target side.
type link struct {
	p              *Proxy
	client, server *net.TCPConn
	done           chan struct{} // closed when the link is torn down
	once           sync.Once
}

// abort tears the link down with an RST on both sides. It reports
// whether it did: false when the link was torn down already.
func (l *link) abort() bool {
	aborted := false
	l.once.Do(func() {
		aborted = true
		close(l.done)
		abortConn(l.client)
		abortConn(l.server)
	})
	return aborted
}

// closeBoth closes both sides normally (after both directions ended).
func (l *link) closeBoth() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

func abortConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

type chunk struct {
	data []byte
	at   time.Time // when it was read
	err  error     // the read error that ends the direction
}

// forward copies src to dst through a bounded queue: a reader stamps each
// chunk, the writer holds it while the proxy is blackholed and until its
// latency has passed. EOF is passed on as a half close; any other error
// aborts the link.
func (l *link) forward(src, dst *net.TCPConn) {
	q := make(chan chunk, chunkQueue)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		l.read(src, q)
	}()
	defer func() { <-readerDone }()
	for {
		var c chunk
		select {
		case c = <-q:
		case <-l.done:
			return
		}
		if !l.hold(c) || !l.write(dst, c) {
			return
		}
	}
}

// read stamps what src delivers and queues it for the writer, until a
// read error (queued too) or the link is torn down.
func (l *link) read(src *net.TCPConn, q chan<- chunk) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		var c chunk
		if n > 0 {
			c = chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
		if err != nil {
			c.err, c.at = err, time.Now()
		}
		select {
		case q <- c:
		case <-l.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// hold waits while the proxy is blackholed and until c's latency has
// passed; it reports false when the link was torn down meanwhile.
func (l *link) hold(c chunk) bool {
	select {
	case <-l.p.gate():
	case <-l.done:
		return false
	}
	if wait := time.Until(c.at.Add(time.Duration(l.p.latency.Load()))); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.done:
			return false
		}
	}
	return true
}

// write passes c on to dst: its data, then its end (EOF as a half close,
// any other error as an abort). It reports false when the direction ended.
func (l *link) write(dst *net.TCPConn, c chunk) bool {
	if len(c.data) > 0 {
		if _, err := dst.Write(c.data); err != nil {
			l.abort()
			return false
		}
	}
	if c.err == nil {
		return true
	}
	if errors.Is(c.err, io.EOF) {
		_ = dst.CloseWrite()
	} else {
		l.abort()
	}
	return false
}
