package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/topiccache"
	"github.com/eventbus-go/bus/internal/trimset"
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
	// pubBound bounds a round trip of a Publish whose ctx has no
	// deadline (see publishCtx); 0: unbounded.
	pubBound time.Duration
	// rawReads: XREADGROUP replies are read raw and parsed by the
	// backend (see resp.go); it needs a read client whose read timeout
	// leaves room for BLOCK, which go-redis extends only for its typed
	// XREADGROUP.
	rawReads bool
	// inlineReads: reads may run on the caller's goroutine (see
	// reader.read); it needs raw reads on a read client that applies ctx
	// deadlines to socket I/O.
	inlineReads bool

	ownClient bool // opened from a URL: Close closes client
	ownRead   bool // cloned by New: Close closes read

	pubs       topiccache.Cache[*pubTopic] // per-topic publish state
	maxLenArgs []any                       // MAXLEN ~ n of every XADD, boxed; nil without
	dedupArg   any                         // the dedup window in ms (rounded up) for pubScript, boxed

	// trims holds the topics the backend published to or bounded, which
	// its trim loop (retention.go) trims; bounded is set once a topic has
	// a retention bound.
	trims      trimset.Set
	trimCancel context.CancelFunc // stops the trim loop; nil until it runs
	bounded    atomic.Bool

	shut    atomic.Bool // closed, readable without mu
	mu      sync.Mutex
	closed  bool
	topics  map[string]*topicState
	reclaim map[reclaimKey]*reclaimer
	wg      sync.WaitGroup // background goroutines
	reads   sync.WaitGroup // reads in flight, abandoned ones included
	stats   stats
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Pinger  = (*Backend)(nil)
)

// Client returns the client the backend publishes and acknowledges with,
// configured as the backend's URL or options say. The backend keeps
// owning it: Close closes it when the backend opened it from a URL.
func (b *Backend) Client() redis.UniversalClient { return b.client }

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
	if o.MaxLen > 0 && (o.Retention == RetainMaxLen || o.Retention == RetainSettled) {
		b.maxLenArgs = []any{"MAXLEN", "~", o.MaxLen}
	}
	b.dedupArg = "0"
	if o.DedupWindow > 0 {
		b.dedupArg = strconv.FormatInt((o.DedupWindow + time.Millisecond - 1).Milliseconds(), 10)
	}
	_, b.cluster = client.(*redis.ClusterClient)
	b.ctxTimeouts = contextTimeouts(client)
	b.pubBound = publishBound(client)
	if o.ReadClient != nil {
		b.read = o.ReadClient
		b.rawReads = rawReadsOK(o.ReadClient, o.Block)
		b.inlineReads = b.rawReads && contextTimeouts(o.ReadClient)
		return b, nil
	}
	// The read client carries only blocking reads (and CLIENT ID): its
	// read timeout is the longest BLOCK plus readGrace, the bound every
	// read has anyway.
	b.rawReads, b.inlineReads = true, true
	switch c := client.(type) {
	case *redis.Client:
		ro := *c.Options()
		// The push processor belongs to the original client.
		ro.PushNotificationProcessor = nil
		ro.MaintNotificationsConfig = readMaintConfig()
		ro.ContextTimeoutEnabled = true
		ro.ReadTimeout = o.Block + readGrace
		// Every subscription holds one connection of this pool.
		ro.PoolSize = max(ro.PoolSize, readPoolSize)
		b.read, b.ownRead = redis.NewClient(&ro), true
	case *redis.ClusterClient:
		co := *c.Options()
		co.PushNotificationProcessor = nil
		co.MaintNotificationsConfig = readMaintConfig()
		co.ContextTimeoutEnabled = true
		co.ReadTimeout = o.Block + readGrace
		co.PoolSize = max(co.PoolSize, readPoolSize)
		b.read, b.ownRead = redis.NewClusterClient(&co), true
	default:
		return nil, fmt.Errorf("%w: client type %T needs Options.ReadClient for blocking reads", ErrInvalidOption, client)
	}
	return b, nil
}

// rawReadsOK reports whether blocking reads on a given read client may
// use raw replies: its socket read deadline must not end a read before
// its BLOCK does, and must exist (from the read timeout, or from ctx when
// it applies ctx deadlines) so that an abandoned read ends. Otherwise
// reads use go-redis's typed XREADGROUP, whose deadline go-redis extends
// by the BLOCK.
func rawReadsOK(c redis.UniversalClient, block time.Duration) bool {
	var rt time.Duration
	var ctxTimeouts bool
	switch c := c.(type) {
	case *redis.Client:
		rt, ctxTimeouts = c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		rt, ctxTimeouts = c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	default:
		return false
	}
	// After go-redis's defaults: 0 means no timeout (ctx deadlines only,
	// if enabled) and -1 no deadline at all.
	return rt >= block+readGrace || rt == 0 && ctxTimeouts
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
		PublishDedup:   true,
		Extend:         true,
		Scheduling:     true,
		Broadcast:      true,
		Results:        true,
		MaxPayload:     b.opts.MaxPayload,
		MaxPayloadLimit: "the redisstream backend's max_payload (URL parameter; Options.MaxPayload); raise it there, " +
			"within the server's proto-max-bulk-len (512 MB unless configured)",
	}
}

func (b *Backend) isClosed() bool { return b.shut.Load() }

// Ping implements backend.Pinger: one PING on the backend's client (on a
// cluster, to one node), within ctx.
func (b *Backend) Ping(ctx context.Context) error {
	if b.shut.Load() {
		return fmt.Errorf("redisstream: ping: %w", backend.ErrClosed)
	}
	if err := b.call(ctx, func(ctx context.Context) error { return b.client.Ping(ctx).Err() }); err != nil {
		return fmt.Errorf("redisstream: ping: %w", err)
	}
	return nil
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
	// The member counts from now on, not from its first delivery (a read
	// that finds nothing does not create the consumer on Redis 7.0).
	if err := b.call(ctx, func(ctx context.Context) error {
		return createConsumer(ctx, b.client, k.stream, cfg.Group, s.consumer)
	}); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, err)
	}
	// The group reclaims by its longest member's ack timeout; record ours
	// before the first reclaim.
	if err := s.joinLease(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, err)
	}
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
	b.shut.Store(true)
	if b.trimCancel != nil {
		b.trimCancel()
	}
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

// createConsumer adds consumer to group (XGROUP CREATECONSUMER), so that
// inspection counts a member before it has received anything.
func createConsumer(ctx context.Context, c redis.Cmdable, stream, group, consumer string) error {
	if err := c.XGroupCreateConsumer(ctx, stream, group, consumer).Err(); err != nil {
		return fmt.Errorf("create consumer of group %q: %w", group, err)
	}
	return nil
}

// isNoGroup reports whether err says the stream or group does not exist.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}
