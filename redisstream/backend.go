package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/eventbus-go/bus/backend"
)

// Backend is the Redis Streams backend. It is safe for concurrent use.
type Backend struct {
	client  redis.UniversalClient // publishes, acks, scripts
	read    redis.UniversalClient // blocking XREADGROUP only
	cluster bool
	opts    Options

	// ctxTimeouts: client applies ctx deadlines to socket I/O
	// (ContextTimeoutEnabled); otherwise call enforces them.
	ctxTimeouts bool

	ownClient bool // opened from a URL: Close closes client
	ownRead   bool // cloned by New: Close closes read

	mu      sync.Mutex
	closed  bool
	topics  map[string]*topicState
	reclaim map[reclaimKey]*reclaimer
	wg      sync.WaitGroup // background goroutines
	reads   sync.WaitGroup // reads in flight, abandoned ones included
	stats   stats
}

var _ backend.Backend = (*Backend)(nil)

// readPoolSize caps the connections of the read client: one per
// subscription, opened on demand.
const readPoolSize = 4096

// readMaintConfig turns maintenance notifications off on the read client:
// its connections are dedicated to one subscription each, and the
// notification handshake (which Redis 7.0 refuses) would otherwise rewrite
// options that those connections share.
func readMaintConfig() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// New returns a backend over client, which may be a *redis.Client
// (single node or sentinel failover) or a *redis.ClusterClient; other
// UniversalClient types need Options.ReadClient. opts may be nil. Close
// does not close client.
//
// Give client ContextTimeoutEnabled: true. Without it go-redis ignores ctx
// deadlines on socket I/O, and the backend enforces them itself by
// running each call whose ctx can end on a goroutine of its own (see
// Deadlines in the package doc). The read client New creates always has
// it.
func New(client redis.UniversalClient, opts *Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Backend{
		client:  client,
		opts:    o,
		topics:  map[string]*topicState{},
		reclaim: map[reclaimKey]*reclaimer{},
	}
	_, b.cluster = client.(*redis.ClusterClient)
	b.ctxTimeouts = contextTimeouts(client)
	if o.ReadClient != nil {
		b.read = o.ReadClient
		return b, nil
	}
	switch c := client.(type) {
	case *redis.Client:
		ro := *c.Options()
		// The push processor belongs to the original client.
		ro.PushNotificationProcessor = nil
		ro.MaintNotificationsConfig = readMaintConfig()
		ro.ContextTimeoutEnabled = true
		// Every subscription holds one connection of this pool.
		ro.PoolSize = max(ro.PoolSize, readPoolSize)
		b.read, b.ownRead = redis.NewClient(&ro), true
	case *redis.ClusterClient:
		co := *c.Options()
		co.PushNotificationProcessor = nil
		co.MaintNotificationsConfig = readMaintConfig()
		co.ContextTimeoutEnabled = true
		co.PoolSize = max(co.PoolSize, readPoolSize)
		b.read, b.ownRead = redis.NewClusterClient(&co), true
	default:
		return nil, fmt.Errorf("%w: client type %T needs Options.ReadClient for blocking reads", ErrInvalidOption, client)
	}
	return b, nil
}

// Capabilities reports what the backend guarantees. Persistence holds as
// far as the Redis server persists its data (AOF or RDB).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:           "redis",
		ConsumerGroups: true,
		Persistent:     true,
		Redelivery:     true,
		NackDelay:      true,
		Ordered:        true,
		StartOldest:    true,
		Extend:         true,
		MaxPayload:     b.opts.MaxPayload,
	}
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Publish adds every message of the batch to the topic's stream in one
// pipelined round trip.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	key := streamKey(b.opts.Prefix, topic)
	n, nm := 0, 0
	for _, m := range msgs {
		n += fieldCount(m)
		nm += metaSize(m)
	}
	vals := make([]any, 0, n)
	metas := make([]byte, 0, nm) // one buffer for the meta values of the batch
	cmds := make([]*redis.StringCmd, len(msgs))
	args := make([]redis.XAddArgs, len(msgs))
	pipe := b.client.Pipeline()
	for i, m := range msgs {
		start, ms := len(vals), len(metas)
		metas = appendMeta(metas, m)
		vals = appendFields(vals, m, metas[ms:len(metas):len(metas)])
		a := &args[i]
		a.Stream = key
		a.Values = vals[start:len(vals):len(vals)]
		b.retention(a)
		cmds[i] = pipe.XAdd(ctx, a)
	}
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := pipe.Exec(ctx)
		return err
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// The pipeline may have been abandoned: its replies are not
		// ours to read, and any of the batch may have been stored.
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	var failed []backend.Failure
	for i, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			failed = append(failed, backend.Failure{Index: i, Err: fmt.Errorf("redisstream: publish %q: %w", topic, cerr)})
		}
	}
	if len(failed) == 0 || len(failed) == len(msgs) {
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	return &backend.BatchError{Failed: failed}
}

// retention sets the trimming arguments of one XADD.
func (b *Backend) retention(a *redis.XAddArgs) {
	switch b.opts.Retention {
	case RetainMaxLen:
		a.MaxLen, a.Approx = b.opts.MaxLen, true
	case RetainMaxAge:
		a.MinID, a.Approx = strconv.FormatInt(time.Now().Add(-b.opts.MaxAge).UnixMilli(), 10), true
	case RetainSettled:
		if b.opts.MaxLen > 0 {
			a.MaxLen, a.Approx = b.opts.MaxLen, true
		}
	}
}

// Subscribe joins (creating if needed) the consumer group cfg.Group on the
// topic's stream as a new consumer.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	k := newKeys(b.opts.Prefix, topic)
	start := "$"
	if cfg.StartFrom == backend.StartOldest {
		start = "0"
	}
	if err := b.call(ctx, func(ctx context.Context) error {
		return createGroup(ctx, b.client, k.stream, cfg.Group, start)
	}); err != nil {
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, backend.ErrClosed)
	}
	ts := b.topics[topic]
	if ts == nil {
		ts = newTopicState(b, topic, k)
		b.topics[topic] = ts
	}
	ts.refs++
	ts.addAckTimeout(cfg.AckTimeout)
	rk := reclaimKey{topic: topic, group: cfg.Group}
	rc := b.reclaim[rk]
	if rc == nil {
		rc = &reclaimer{}
		b.reclaim[rk] = rc
	}
	rc.refs++
	b.mu.Unlock()

	s := newSubscription(b, topic, k, cfg, ts, rc)
	// Refresh holds before the first reclaim, so a delayed nack whose hold
	// went stale while no process ran is not handed out early.
	if err := b.call(ctx, ts.promote); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, err)
	}
	ts.start()
	return s, nil
}

// release drops a subscription's references to shared per-topic state.
func (b *Backend) release(topic string, cfg backend.SubscribeConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ts := b.topics[topic]; ts != nil {
		ts.removeAckTimeout(cfg.AckTimeout)
		ts.refs--
		if ts.refs == 0 {
			ts.stop()
			delete(b.topics, topic)
		}
	}
	rk := reclaimKey{topic: topic, group: cfg.Group}
	if rc := b.reclaim[rk]; rc != nil {
		rc.refs--
		if rc.refs == 0 {
			delete(b.reclaim, rk)
		}
	}
}

// Close stops the backend's background work and closes the clients it
// created. The bus closes every subscription first.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("redisstream: close: %w", backend.ErrClosed)
	}
	b.closed = true
	for name, ts := range b.topics {
		ts.stop()
		delete(b.topics, name)
	}
	b.mu.Unlock()
	b.wg.Wait()
	var errs []error
	if b.ownRead {
		// Closing the read client ends abandoned reads at once.
		if err := b.read.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	b.reads.Wait()
	if b.ownClient {
		if err := b.client.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redisstream: close: %w", err)
	}
	return nil
}

// createGroup creates group on stream at start, creating the stream too. A
// group that exists already is left where it stands.
func createGroup(ctx context.Context, c redis.Cmdable, stream, group, start string) error {
	err := c.XGroupCreateMkStream(ctx, stream, group, start).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create group %q: %w", group, err)
	}
	return nil
}

// isNoGroup reports whether err says the stream or group does not exist.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}
