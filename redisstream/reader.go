package redisstream

import (
	"context"
	"errors"
	"fmt"
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

	mu     sync.Mutex // guards the fields below against Close
	conn   *redis.Conn
	node   redis.Cmdable // where CLIENT UNBLOCK goes
	id     int64
	closed bool
}

// errReaderClosed is returned by read after close.
var errReaderClosed = errors.New("reader closed")

// get returns the connection, opening it (and reading its client ID) when
// needed.
func (r *reader) get(ctx context.Context) (*redis.Conn, redis.Cmdable, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, 0, errReaderClosed
	}
	if r.conn != nil {
		return r.conn, r.node, r.id, nil
	}
	var (
		conn *redis.Conn
		node redis.Cmdable
	)
	switch c := r.b.read.(type) {
	case *redis.Client:
		conn, node = c.Conn(), r.b.client
	case *redis.ClusterClient:
		nc, err := c.MasterForKey(ctx, r.stream)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("find the node of %s: %w", r.stream, err)
		}
		conn, node = nc.Conn(), nc
	default:
		return nil, nil, 0, fmt.Errorf("read client type %T cannot give a connection of its own", r.b.read)
	}
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("client id: %w", err)
	}
	r.conn, r.node, r.id = conn, node, id
	return conn, node, id, nil
}

// drop closes the connection after an error, so the next read opens a
// fresh one (with a fresh client ID, on the right node).
func (r *reader) drop(err error) {
	r.mu.Lock()
	conn := r.conn
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

// read runs one XREADGROUP. If ctx ends while the read is blocked, the read
// is unblocked and ctx.Err() returned; entries it had already taken stay
// pending and are reclaimed after their lease.
//
// Deadlines: BLOCK is cut to what is left of ctx's deadline, and the read
// itself is abandoned (its connection dropped) readGrace after its BLOCK
// ends, so a dead link never holds a read for the client's blocking
// timeout (BLOCK + 10s in go-redis). CLIENT UNBLOCK is bounded by
// unblockTimeout.
func (r *reader) read(ctx context.Context, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		args.Block = max(min(args.Block, left), time.Millisecond)
	}
	conn, node, id, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		uctx, cancel := context.WithTimeout(context.Background(), unblockTimeout)
		defer cancel()
		_ = r.b.async(uctx, func(uctx context.Context) error {
			return node.ClientUnblock(uctx, id).Err()
		})
	})
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), args.Block+readGrace)
	defer cancel()
	res, err := r.readOn(rctx, conn, args)
	if !stop() {
		<-unblocked
		if err == nil || errors.Is(err, redis.Nil) {
			// Entries read just before the unblock are returned: they
			// were delivered and their lease has started.
			if len(res) > 0 && len(res[0].Messages) > 0 {
				return res, nil
			}
			return nil, ctx.Err()
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) && !isNoGroup(err) {
		r.drop(err)
	}
	return res, err
}

// readOn runs the XREADGROUP on conn. The read client is created with
// ContextTimeoutEnabled, so ctx's deadline ends it; a ReadClient given
// without it is bounded here instead.
func (r *reader) readOn(ctx context.Context, conn *redis.Conn, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	var res []redis.XStream
	read := func(ctx context.Context) error {
		var err error
		res, err = conn.XReadGroup(ctx, args).Result()
		return err
	}
	if r.b.readTimeouts {
		err := read(ctx)
		return res, err
	}
	if err := r.b.async(ctx, read); err != nil {
		if ctx.Err() != nil {
			// Abandoned mid-read: the connection holds a reply to
			// come and must not be reused.
			r.drop(err)
			return nil, err
		}
		return nil, err
	}
	return res, nil
}

// close releases the connection.
func (r *reader) close() {
	r.mu.Lock()
	r.closed = true
	conn := r.conn
	r.conn = nil
	r.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}
