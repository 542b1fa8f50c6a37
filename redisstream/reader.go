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
	busy   bool // a read is using conn; close leaves conn to it
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

// acquire returns the connection for one read and marks it busy.
func (r *reader) acquire(ctx context.Context) (*redis.Conn, redis.Cmdable, int64, error) {
	conn, node, id, err := r.get(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	r.mu.Lock()
	r.busy = true
	r.mu.Unlock()
	return conn, node, id, nil
}

// release ends a read; if close ran meanwhile, the read closes the
// connection, since a go-redis connection must not be closed while a
// command is using it.
func (r *reader) release() {
	r.mu.Lock()
	r.busy = false
	var conn *redis.Conn
	if r.closed {
		conn, r.conn = r.conn, nil
	}
	r.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
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
func (r *reader) read(ctx context.Context, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	conn, node, id, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer r.release()
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		uctx, cancel := context.WithTimeout(context.Background(), unblockTimeout)
		defer cancel()
		_ = node.ClientUnblock(uctx, id).Err()
	})
	res, err := conn.XReadGroup(context.WithoutCancel(ctx), args).Result()
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

// unblockTimeout bounds a CLIENT UNBLOCK: on a dead link the blocked read
// ends by its own deadline anyway.
const unblockTimeout = 2 * time.Second

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
		_ = node.ClientUnblock(ctx, id).Err()
		return
	}
	_ = conn.Close()
}
