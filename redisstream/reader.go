package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// reader is a subscription's own connection for blocking XREADGROUP
// calls, taken from the backend's read client (on a cluster, from the
// client of the node that holds the stream). Because the connection is the
// subscription's alone, a read never waits behind other commands, and a
// cancelled ctx can end a blocked read at once: another connection sends
// CLIENT UNBLOCK with the reader's client ID.
type reader struct {
	b      *Backend
	stream string

	// spare is the reply buffer of the last raw read, reused by the
	// next; only the goroutine that calls read touches it. A read that is
	// abandoned keeps its buffer.
	spare *replyBuffer
	// lastFound: the last read returned entries, so the next one runs
	// inline (see read); only the goroutine that calls read touches it.
	lastFound bool

	mu   sync.Mutex // guards the fields below against Close
	conn *redis.Conn
	node redis.Cmdable // where CLIENT UNBLOCK goes
	id   int64
	// fixed: node is one server's address (not a Sentinel failover
	// client, whose next master numbers its clients anew), so the ID
	// names the connection there for good.
	fixed  bool
	closed bool
	busy   bool // a read is using conn; close leaves conn to it
	// lost are the connections given up on while a read on them may
	// still run at the server, to be fenced (see recover.go).
	lost  []lostRead
	lostN int // connections given up on so far
}

// failoverAddr is the address go-redis gives the options of a Sentinel
// failover client.
const failoverAddr = "FailoverClient"

// errReaderClosed is returned by read after close.
var errReaderClosed = errors.New("reader closed")

// get returns the connection, opening it (and reading its client ID) when
// needed. The opening runs without the lock and returns when ctx ends, so
// close never waits for a dial over a dead link.
func (r *reader) get(ctx context.Context) (*redis.Conn, redis.Cmdable, int64, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, 0, errReaderClosed
	}
	if r.conn != nil {
		defer r.mu.Unlock()
		return r.conn, r.node, r.id, nil
	}
	r.mu.Unlock()
	var (
		conn  *redis.Conn
		node  redis.Cmdable
		id    int64
		fixed bool
	)
	err := r.b.asyncOrRelease(ctx, func(ctx context.Context) error {
		switch c := r.b.read.(type) {
		case *redis.Client:
			conn, node = c.Conn(), r.b.client
			fixed = c.Options().Addr != failoverAddr
		case *redis.ClusterClient:
			nc, err := c.MasterForKey(ctx, r.stream)
			if err != nil {
				return fmt.Errorf("find the node of %s: %w", r.stream, err)
			}
			conn, node, fixed = nc.Conn(), nc, true
		default:
			return fmt.Errorf("read client type %T cannot give a connection of its own", r.b.read)
		}
		var err error
		if id, err = conn.ClientID(ctx).Result(); err != nil {
			_ = conn.Close()
			conn = nil
			return fmt.Errorf("client id: %w", err)
		}
		return nil
	}, func() {
		// Abandoned: close the connection the opening got.
		if conn != nil {
			_ = conn.Close()
		}
	})
	if err != nil {
		return nil, nil, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = conn.Close()
		return nil, nil, 0, errReaderClosed
	}
	r.conn, r.node, r.id, r.fixed = conn, node, id, fixed
	return conn, node, id, nil
}

// drop closes the connection after an error, so the next read opens a
// fresh one (with a fresh client ID, on the right node).
func (r *reader) drop(err error) {
	r.mu.Lock()
	conn := r.conn
	if conn != nil {
		r.noteLost()
	}
	r.conn = nil
	r.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	if c, ok := r.b.read.(*redis.ClusterClient); ok && isTopologyError(err) {
		c.ReloadState(context.Background())
	}
}

func isTopologyError(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED") || strings.HasPrefix(s, "ASK") || strings.HasPrefix(s, "CLUSTERDOWN") || strings.HasPrefix(s, "TRYAGAIN")
}

// readResult is what one XREADGROUP returned: the raw reply (raw reads)
// or the typed one.
type readResult struct {
	raw []byte
	buf *replyBuffer // holds raw; give it back with recycle
	res []redis.XStream
	err error
}

// maxSpareReply bounds the reply buffer a reader keeps between reads.
const maxSpareReply = 1 << 20

// replyBuffer collects the raw reply of one read. Its ReadFrom reads a
// bulk string straight into the buffer, which go-redis's raw reply
// writer (io.CopyN) uses.
type replyBuffer struct{ b []byte }

func (w *replyBuffer) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// ReadFrom appends what r yields until io.EOF.
func (w *replyBuffer) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	if lr, ok := r.(*io.LimitedReader); ok && lr.N <= math.MaxInt32 {
		w.b = slices.Grow(w.b, int(lr.N))
	}
	for {
		if len(w.b) == cap(w.b) {
			w.b = slices.Grow(w.b, 512)
		}
		n, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+n]
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// recycle gives a reply buffer back once its reply has been decoded.
func (r *reader) recycle(rr readResult) {
	if rr.buf != nil && cap(rr.buf.b) <= maxSpareReply {
		rr.buf.b = rr.buf.b[:0]
		r.spare = rr.buf
	}
}

// found reports whether the read returned entries.
func (rr readResult) found() bool {
	if rr.err != nil {
		return false
	}
	return len(rr.raw) > 0 || len(rr.res) > 0 && len(rr.res[0].Messages) > 0
}

// read runs one XREADGROUP: with raw reads (see Backend.rawReads) it
// returns the raw reply, which holds entries when its error is nil;
// otherwise go-redis's typed reply. If ctx ends while the read is
// blocked, the read is unblocked and ctx.Err() returned; entries it had
// already taken stay pending, and the subscription takes them back
// before its next read (recover.go).
//
// Deadlines: BLOCK is cut to what is left of ctx's deadline. When ctx
// ends, CLIENT UNBLOCK (bounded by unblockTimeout) ends the read on a
// live link. A read that follows one which found entries runs inline,
// on the caller's goroutine (a goroutine per read costs more than the
// rest of a busy receive path): its BLOCK is cut to inlineBlock and its
// socket deadline is inlineGrace after that, so over a dead link it
// returns within inlineBlock + inlineGrace. Other reads (the stream was
// idle, or a read failed) run on a goroutine of their own with the full
// BLOCK: if the read has not come back within unblockTimeout of ctx's
// end (a dead link), read returns ctx.Err() anyway and abandons the read
// and its connection. An abandoned read ends readGrace after its BLOCK
// (the read client applies ctx deadlines), or when the backend closes its
// read client; Backend.Close waits for it.
func (r *reader) read(ctx context.Context, args *redis.XReadGroupArgs) readResult {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return readResult{err: context.DeadlineExceeded}
		}
		args.Block = max(min(args.Block, left), time.Millisecond)
	}
	inline := r.b.inlineReads && r.lastFound
	if inline {
		args.Block = min(args.Block, inlineBlock)
	}
	rr := r.readOnce(ctx, args, inline)
	r.lastFound = rr.found()
	return rr
}

// readOnce runs one read (see read), inline or on a goroutine of its own.
func (r *reader) readOnce(ctx context.Context, args *redis.XReadGroupArgs, inline bool) readResult {
	conn, node, id, err := r.get(ctx)
	if err != nil {
		return readResult{err: err}
	}
	stop, unblocked := r.unblockOnCancel(ctx, node, id)
	r.mu.Lock()
	r.busy = true
	r.mu.Unlock()
	r.b.reads.Add(1)
	var buf *replyBuffer
	if r.b.rawReads {
		buf, r.spare = r.spare, nil
		if buf == nil {
			buf = &replyBuffer{}
		}
	}
	rr, ok := r.run(ctx, conn, args, buf, inline)
	if !ok {
		return rr
	}
	if !stop() {
		<-unblocked
		if rr.err == nil || errors.Is(rr.err, redis.Nil) {
			// Entries read just before the unblock are returned: they
			// were delivered and their lease has started.
			if rr.found() {
				return rr
			}
			return readResult{err: ctx.Err()}
		}
	}
	if err := rr.err; err != nil && !errors.Is(err, redis.Nil) && !isNoGroup(err) {
		r.drop(err)
	}
	return rr
}

// unblockOnCancel unblocks the read of connection id (CLIENT UNBLOCK on
// node) when ctx ends; unblocked is closed once that is done. stop
// reports false when it has started.
func (r *reader) unblockOnCancel(ctx context.Context, node redis.Cmdable, id int64) (stop func() bool, unblocked chan struct{}) {
	unblocked = make(chan struct{})
	stop = context.AfterFunc(ctx, func() {
		defer close(unblocked)
		uctx, cancel := context.WithTimeout(context.Background(), unblockTimeout)
		defer cancel()
		_ = r.b.async(uctx, func(uctx context.Context) error {
			return node.ClientUnblock(uctx, id).Err()
		})
	})
	return stop, unblocked
}

// run performs the read on the caller's goroutine (inline) or on its own,
// which ctx's end may abandon: ok is false when it was abandoned (rr then
// holds ctx's error).
func (r *reader) run(ctx context.Context, conn *redis.Conn, args *redis.XReadGroupArgs, buf *replyBuffer, inline bool) (rr readResult, ok bool) {
	if inline {
		rr = r.xread(ctx, conn, args, buf, inlineGrace)
		r.b.reads.Done()
		return rr, true
	}
	done := make(chan readResult, 1)
	go func() {
		defer r.b.reads.Done()
		done <- r.xread(ctx, conn, args, buf, readGrace)
	}()
	select {
	case rr = <-done:
		return rr, true
	case <-ctx.Done():
	}
	t := time.NewTimer(unblockTimeout)
	defer t.Stop()
	select {
	case rr = <-done:
		return rr, true
	case <-t.C:
		r.abandon(conn, done)
		return readResult{err: ctx.Err()}, false
	}
}

// xread sends one XREADGROUP on conn, bounded by its BLOCK plus grace,
// into buf when reads are raw, and gives the connection back.
func (r *reader) xread(ctx context.Context, conn *redis.Conn, args *redis.XReadGroupArgs, buf *replyBuffer, grace time.Duration) readResult {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), args.Block+grace)
	defer cancel()
	var rr readResult
	if buf != nil {
		_, rr.err = conn.DoRawWriteTo(rctx, buf, "XREADGROUP", "GROUP", args.Group, args.Consumer,
			"COUNT", args.Count, "BLOCK", args.Block.Milliseconds(), "STREAMS", args.Streams[0], args.Streams[1]).Result()
		if rr.err == nil {
			rr.err = replyErr(buf.b)
		}
		rr.buf = buf
		if rr.err == nil {
			rr.raw = buf.b
		}
	} else {
		rr.res, rr.err = conn.XReadGroup(rctx, args).Result()
	}
	r.finish(conn)
	return rr
}

// abandon gives up a read still in flight on conn: the connection is no
// longer the reader's, and it is closed when the read ends. It is noted
// as lost: entries the read may still take stay pending, and the
// subscription fences it and takes them back before its next read
// (recover.go).
func (r *reader) abandon(conn *redis.Conn, done <-chan readResult) {
	r.mu.Lock()
	if r.conn == conn {
		r.noteLost()
		r.conn = nil
	}
	r.mu.Unlock()
	r.b.reads.Add(1)
	go func() {
		defer r.b.reads.Done()
		<-done
		_ = conn.Close()
	}()
}

// noteLost records the current connection as lost; r.mu is held.
func (r *reader) noteLost() {
	if len(r.lost) == maxLostReads {
		r.lost = append(r.lost[:0], r.lost[1:]...)
	}
	r.lost = append(r.lost, lostRead{node: r.node, id: r.id, fixed: r.fixed})
	r.lostN++
}

// lostTotal returns how many connections the reader gave up on so far.
func (r *reader) lostTotal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lostN
}

// lostReads returns the lost connections not fenced yet.
func (r *reader) lostReads() []lostRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

// fenced forgets l once its connection is fenced.
func (r *reader) fenced(l lostRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = slices.DeleteFunc(r.lost, func(x lostRead) bool { return x.id == l.id && x.node == l.node })
}

// finish ends a read on conn. If close ran meanwhile, the read closes the
// connection: a go-redis connection must not be closed while a command is
// using it.
func (r *reader) finish(conn *redis.Conn) {
	r.mu.Lock()
	r.busy = false
	closeIt := r.closed && r.conn == conn
	if closeIt {
		r.conn = nil
	}
	r.mu.Unlock()
	if closeIt {
		_ = conn.Close()
	}
}

// close releases the connection. A read in progress is unblocked and
// closes the connection itself when it returns.
func (r *reader) close() {
	r.mu.Lock()
	r.closed = true
	conn, node, id, busy := r.conn, r.node, r.id, r.busy
	if !busy {
		r.conn = nil
	}
	r.mu.Unlock()
	if conn == nil {
		return
	}
	if busy {
		ctx, cancel := context.WithTimeout(context.Background(), unblockTimeout)
		defer cancel()
		_ = r.b.async(ctx, func(ctx context.Context) error {
			return node.ClientUnblock(ctx, id).Err()
		})
		return
	}
	_ = conn.Close()
}
