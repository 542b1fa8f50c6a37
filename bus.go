package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/coalesce"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/shutdown"
	"github.com/eventbus-go/bus/observer"
)

// Bus publishes to and subscribes on one backend. It implements Publisher
// and Subscriber and is safe for concurrent use.
type Bus struct {
	be      backend.Backend
	caps    backend.Capabilities
	opts    busOptions
	optErr  error
	publish Publisher
	batcher *coalesce.Coalescer
	// events is the lifecycle events emitter (WithEvents); nil when off.
	events *lifecycle.Emitter
	// eventsBounded is set once the backend has taken the events topic's
	// retention bound (events.go).
	eventsBounded atomic.Bool

	// ops counts publishes, subscribes being set up and the bus's own
	// background goroutines; no lock is held across any of them.
	ops  inflight
	mu   sync.Mutex // guards subs only, never held across I/O or a wait
	subs map[*Subscription]struct{}
	// parts caches each topic's partition count (partition.go).
	parts sync.Map
	// closed is closed when the first Close has returned.
	closed chan struct{}
	// async holds the PublishAsync queues (publish_async.go).
	async asyncPublisher
}

// New returns a Bus over b. An invalid option makes every later call
// return an error wrapping ErrInvalidOption.
func New(b Backend, opts ...Option) *Bus {
	if b == nil {
		o, _ := buildBusOptions(nil)
		bus := newBus(nilBackend{}, o)
		bus.optErr = fmt.Errorf("bus: %w: nil backend", ErrInvalidOption)
		return bus
	}
	o, err := buildBusOptions(opts)
	if err != nil {
		o.events = "" // a bus that refuses every call makes no events
	}
	bus := newBus(b, o)
	bus.optErr = err
	return bus
}

func buildBusOptions(opts []Option) (busOptions, error) {
	o := busOptions{maxPayload: backend.DefaultMaxPayload, ackBatch: 256, ackInterval: 5 * time.Millisecond,
		eventsBound: backend.RetentionBound{MaxAge: DefaultEventsMaxAge, MaxLen: DefaultEventsMaxLen}}
	var errs []error
	for _, opt := range opts {
		if opt == nil {
			errs = append(errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		if err := opt.applyBus(&o); err != nil {
			errs = append(errs, err)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.observer == nil {
		// Failures are never silent by default: a dead letter, a panic or
		// a subscription that ended is logged; a retry is not.
		o.observer = observer.Slog(o.logger)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("bus: %w", errors.Join(errs...))
	}
	return o, nil
}

func newBus(be backend.Backend, o busOptions) *Bus {
	b := &Bus{be: be, caps: be.Capabilities(), opts: o, subs: map[*Subscription]struct{}{}, closed: make(chan struct{})}
	b.opts.maxPayload, b.opts.payloadLimit = payloadLimit(o.maxPayload, o.maxPayloadSet, b.caps)
	b.batcher = coalesce.New(be, o.batching.config(), &b.ops)
	b.publish = corePublisher{b}
	if o.events != "" {
		b.startEvents()
	}
	for i := len(o.publishMW) - 1; i >= 0; i-- {
		if p := o.publishMW[i](b.publish); p != nil {
			b.publish = p
		}
	}
	return b
}

// Capabilities returns what the backend guarantees.
func (b *Bus) Capabilities() Capabilities { return b.caps }

// MaxPayload returns the largest payload Publish accepts: WithMaxPayload's
// (default DefaultMaxPayload), or the backend's own limit when that is
// smaller (see WithMaxPayload).
func (b *Bus) MaxPayload() int { return b.opts.maxPayload }

// Publish validates msgs, assigns IDs to messages without one, and
// publishes them to topic as one batch. Invalid input, and a ctx that
// ended already, are rejected before any I/O and nothing of the batch is
// sent. When some messages fail the
// error is a *PublishError listing them. A nil error means every message
// was accepted by the backend and will be delivered at least once (at most
// once with AckOnReceive or an at-most-once backend).
func (b *Bus) Publish(ctx context.Context, topic string, msgs ...*Message) error {
	if b.optErr != nil {
		return b.optErr
	}
	missing := 0
	for _, m := range msgs {
		if m != nil && m.ID == "" {
			missing++
		}
	}
	var gen string
	if missing > 0 {
		ids := msgid.Batch(missing)
		gen = ids
		for _, m := range msgs {
			if m != nil && m.ID == "" {
				m.ID, ids = ids[:36], ids[36:]
			}
		}
	}
	return b.publishAssigned(ctx, topic, msgs, generatedIDs(gen))
}

// publishAssigned is Publish once every message has an ID; gen are the
// IDs the bus generated (msgid.Batch's, in message order).
func (b *Bus) publishAssigned(ctx context.Context, topic string, msgs []*Message, gen generatedIDs) error {
	if !b.ops.enter() {
		return fmt.Errorf("bus: publish %q: %w", topic, ErrClosed)
	}
	defer b.ops.leave()
	if _, ok := b.publish.(corePublisher); ok {
		return b.publishCore(ctx, topic, msgs, gen)
	}
	if gen != "" {
		ctx = context.WithValue(ctx, generatedKey{}, gen)
	}
	return b.publish.Publish(ctx, topic, msgs...)
}

// corePublisher is the publish path under the publish middleware.
type corePublisher struct{ b *Bus }

func (c corePublisher) Publish(ctx context.Context, topic string, msgs ...*Message) error {
	gen, _ := ctx.Value(generatedKey{}).(generatedIDs)
	return c.b.publishCore(ctx, topic, msgs, gen)
}

// generatedKey is the context key under which Publish passes the IDs it
// generated through the publish middleware to publishCore, which marks
// the messages that still carry one of them (the middleware may copy
// messages) as backend.Message.IDGenerated.
type generatedKey struct{}

// generatedIDs are the IDs one Publish call generated: msgid.Batch's
// increasing IDs of 36 bytes each, concatenated.
type generatedIDs string

// has reports whether id is one of g's IDs, looking at g[at:] first (the
// IDs are assigned in message order, and middleware keeps that order);
// it returns where to look next. The loops over the messages of a Publish
// check isAt themselves first, as has is too large to inline.
func (g generatedIDs) has(id string, at int) (bool, int) {
	if g.isAt(id, at) {
		return true, at + 36
	}
	return g.search(id, at)
}

// isAt reports whether id is the very string at g[at:], where Publish
// assigned it: the common case. It is inlined.
func (g generatedIDs) isAt(id string, at int) bool {
	return len(id) == 36 && at+36 <= len(g) && unsafe.StringData(id) == unsafe.StringData(string(g[at:]))
}

// search is has for an ID that is not the very string at g[at:]: a copy
// of it, one further on, or none of g's.
func (g generatedIDs) search(id string, at int) (bool, int) {
	if len(id) != 36 || len(g) == 0 {
		return false, at
	}
	if at+36 <= len(g) && string(g[at:at+36]) == id {
		return true, at + 36
	}
	n := len(g) / 36
	i := sort.Search(n, func(i int) bool { return string(g[36*i:36*i+36]) >= id })
	return i < n && string(g[36*i:36*i+36]) == id, at
}

func (b *Bus) publishCore(ctx context.Context, topic string, msgs []*Message, gen generatedIDs) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: publish: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	var failed []backend.Failure
	at := 0
	for i, m := range msgs {
		var g bool
		switch {
		case m == nil:
		case gen.isAt(m.ID, at):
			g, at = true, at+36
		default:
			g, at = gen.has(m.ID, at)
		}
		if err := b.checkMessageGen(m, g); err != nil {
			id := ""
			if m != nil {
				id = m.ID
			}
			failed = append(failed, backend.Failure{Index: i, ID: id, Err: err})
		}
	}
	if failed != nil {
		return &PublishError{Topic: topic, Failed: failed, Rejected: true}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bus: publish %q: %w", topic, err)
	}
	return b.publishValid(ctx, topic, msgs, gen, false)
}

// checkMessage validates one message of a Publish to this bus.
func (b *Bus) checkMessage(m *Message) error { return b.checkMessageGen(m, false) }

// checkMessageGen is checkMessage for a message whose ID, when generated
// is set, is one that Publish generated for it (generatedIDs.has).
func (b *Bus) checkMessageGen(m *Message, generated bool) error {
	if generated && plain(m) && len(m.Payload) <= b.opts.maxPayload {
		// Nothing there is to check is set but the payload: the ID is
		// the bus's own.
		return nil
	}
	err := validateMessageGen(m, b.opts.maxPayload, b.opts.payloadLimit, generated)
	if err == nil && !m.DeliverAt.IsZero() && !b.caps.Scheduling && !b.caps.Redelivery {
		err = fmt.Errorf("%w: DeliverAt: %s neither holds messages nor redelivers, so it could deliver early", ErrUnsupported, b.caps.Name)
	}
	return err
}

// publishValid publishes msgs, each already checked, as one batch
// (partitioned, and combined unless direct, see sendBatch), marking those
// whose ID is one of gen's. A failure of some messages is a
// *PublishError.
func (b *Bus) publishValid(ctx context.Context, topic string, msgs []*Message, gen generatedIDs, direct bool) error {
	buf := spiBatch(msgs, gen)
	defer putPublishBuf(buf)
	n, err := b.partitionsOf(ctx, topic)
	if err != nil {
		return fmt.Errorf("bus: publish %q: %w", topic, err)
	}
	if n > 1 {
		err = b.publishPartitioned(ctx, topic, n, buf.ptrs, direct)
	} else {
		err = b.sendBatch(ctx, topic, buf.ptrs, direct)
	}
	if err == nil {
		return nil
	}
	var be *backend.BatchError
	if errors.As(err, &be) {
		pe := &PublishError{Topic: topic, Failed: make([]backend.Failure, 0, len(be.Failed))}
		for _, f := range be.Failed {
			id := ""
			if f.Index >= 0 && f.Index < len(msgs) {
				id = msgs[f.Index].ID
			}
			pe.Failed = append(pe.Failed, backend.Failure{Index: f.Index, ID: id, Err: f.Err})
		}
		return pe
	}
	return fmt.Errorf("bus: publish %q: %w", topic, err)
}

// sendBatch sends one backend batch of topic: through the coalescer, or,
// when direct, straight to the backend, for a caller that bounds its own
// batches in flight (PublishAsync, within its window).
func (b *Bus) sendBatch(ctx context.Context, topic string, msgs []*backend.Message, direct bool) error {
	if direct {
		return b.be.Publish(ctx, topic, msgs)
	}
	return b.batcher.Publish(ctx, topic, msgs)
}

// publishBuf holds the SPI copies of one batch. The backend contract says
// Publish keeps neither the slice nor the messages after it returns, so the
// bus reuses them across calls instead of allocating per message.
type publishBuf struct {
	vals []backend.Message
	ptrs []*backend.Message
}

// spiBatch returns the SPI copies of msgs in a buffer to put back
// (putPublishBuf) once the backend returned.
func spiBatch(msgs []*Message, gen generatedIDs) *publishBuf {
	now := time.Now()
	buf := getPublishBuf(len(msgs))
	at := 0
	for i, m := range msgs {
		g := gen.isAt(m.ID, at)
		if g {
			at += 36
		} else {
			g, at = gen.has(m.ID, at)
		}
		h := m.Headers
		if !m.DeliverAt.IsZero() || !m.ExpiresAt.IsZero() {
			h = withTimes(m, now)
		}
		setMessage(&buf.vals[i], m.ID, m.Key, h, m.Payload, now, g)
		if buf.ptrs[i] != &buf.vals[i] { // a reused buffer has it already
			buf.ptrs[i] = &buf.vals[i]
		}
	}
	return buf
}

// setMessage makes v, a reused SPI message, a message to publish. It
// writes field by field rather than v = backend.Message{...}: while the
// collector marks, a whole-struct copy runs the write barrier over every
// pointer word of the struct, the zero ones included.
func setMessage(v *backend.Message, id, key string, h map[string]string, payload []byte, at time.Time, generated bool) {
	v.ID, v.Payload, v.PublishedAt, v.IDGenerated = id, payload, at, generated
	if v.Key != "" || key != "" {
		v.Key = key
	}
	if v.Headers != nil || h != nil {
		v.Headers = h
	}
	if v.AckID != nil {
		v.AckID = nil
	}
	v.Attempt = 0
}

// maxPooledBatch bounds the batches whose buffers are kept for reuse.
const maxPooledBatch = 1024

var publishBufs = sync.Pool{New: func() any { return new(publishBuf) }}

func getPublishBuf(n int) *publishBuf {
	buf := publishBufs.Get().(*publishBuf)
	if cap(buf.vals) < n {
		buf.vals = make([]backend.Message, n)
		buf.ptrs = make([]*backend.Message, n)
	}
	buf.vals, buf.ptrs = buf.vals[:n], buf.ptrs[:n]
	return buf
}

func putPublishBuf(buf *publishBuf) {
	if cap(buf.vals) > maxPooledBatch {
		return
	}
	// Not cleared: the next use assigns every element whole, and a pooled
	// buffer's references to the last batch end when the pool drops it
	// (within two collections), so clearing would only cost time.
	publishBufs.Put(buf)
}

// Subscribe starts h on topic. Options are validated before any I/O. The
// subscription runs until Close, until ctx ends, or until the bus closes;
// when ctx ends it shuts down as Close(context.Background()) would.
func (b *Bus) Subscribe(ctx context.Context, topic string, h Handler, opts ...SubscribeOption) (*Subscription, error) {
	if b.optErr != nil {
		return nil, b.optErr
	}
	if err := backend.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	if h == nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w: nil handler", topic, ErrInvalidOption)
	}
	o, err := b.subscribeOptions(topic, opts)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, err)
	}

	// Hold a place so Close waits (within its ctx) for this subscription
	// to finish starting.
	if !b.ops.enter() {
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, ErrClosed)
	}
	defer b.ops.leave()

	n, err := b.partitionsOf(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, err)
	}
	var s *Subscription
	switch {
	case o.keyHold && !b.canPeek(ctx, o.deadLetter):
		err = fmt.Errorf("%w: WithKeyFailure(KeyHold) reads its holds back from the dead-letter topic, and %s cannot read a topic without consuming it (Inspector.Peek); use WithKeyFailure(KeySkip) on it", ErrUnsupported, b.caps.Name)
	case n > 1 && o.keyHold:
		err = fmt.Errorf("%w: topic of %d partitions: WithKeyFailure(KeyHold) needs an unpartitioned topic", ErrUnsupported, n)
	case n > 1 && o.broadcast:
		err = fmt.Errorf("%w: topic of %d partitions: a broadcast subscription needs an unpartitioned topic", ErrUnsupported, n)
	case n > 1:
		s, err = b.subscribePartitioned(ctx, topic, n, h, o)
	default:
		s, err = b.subscribeOne(ctx, topic, h, o)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, err)
	}
	b.mu.Lock()
	if b.ops.isClosed() {
		b.mu.Unlock()
		s.discard()
		return nil, fmt.Errorf("bus: subscribe %q: %w", topic, ErrClosed)
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	s.startRun()
	b.opts.logger.LogAttrs(ctx, slog.LevelDebug, "bus: subscribed",
		slog.String("backend", b.caps.Name), slog.String("topic", topic), slog.String("group", o.group),
		slog.String("ack_mode", string(o.ackMode)), slog.Int("max_in_flight", o.maxInFlight),
		slog.Duration("ack_timeout", o.ackTimeout))
	return s, nil
}

// subscribeOne subscribes an unpartitioned topic; the subscription is
// started by startRun.
func (b *Bus) subscribeOne(ctx context.Context, topic string, h Handler, o subscribeOptions) (*Subscription, error) {
	var lease *broadcastLease
	if o.broadcast {
		var err error
		if lease, err = b.takeBroadcastLease(ctx, topic, o); err != nil {
			return nil, err
		}
	}
	bsub, err := b.be.Subscribe(ctx, topic, b.backendConfig(o))
	if err != nil {
		if lease != nil {
			lease.discard()
		}
		return nil, err
	}
	s := &Subscription{topic: topic, group: o.group, bus: b}
	if b.events != nil {
		s.member = memberName()
	}
	cfg := b.consumerConfig(s, topic, o, h)
	cfg.Broadcast = lease
	cfg.Autoscale = b.autoscaler(s, 1, o)
	if cfg.Autoscale != nil {
		cfg.scale(cfg.Autoscale)
	}
	s.run = newConsumer(ctx, b, s, cfg, bsub)
	return s, nil
}

// backendConfig is what a backend subscription is made with.
func (b *Bus) backendConfig(o subscribeOptions) backend.SubscribeConfig {
	return backend.SubscribeConfig{
		Group:           o.group,
		StartFrom:       o.startFrom,
		AckTimeout:      o.ackTimeout,
		MaxInFlight:     o.heldBound(),
		MaxDeliveries:   o.maxDeliveries,
		DeadLetterTopic: o.deadLetter,
		Observer:        b.opts.observer,
	}
}

// consumerConfig is what a consumer of s on topic (the stored topic: a
// partition's for a partitioned one) runs with: the options, and the
// handler inside its middleware.
func (b *Bus) consumerConfig(s *Subscription, topic string, o subscribeOptions, h Handler) consumerConfig {
	handler := h
	for i := len(o.middleware) - 1; i >= 0; i-- {
		handler = o.middleware[i](handler)
	}
	for i := len(b.opts.middleware) - 1; i >= 0; i-- {
		handler = b.opts.middleware[i](handler)
	}
	cfg := consumerConfig{
		Topic: topic, PubTopic: s.topic, Group: o.group, AckMode: o.ackMode,
		MaxInFlight: o.maxInFlight, AckTimeout: o.ackTimeout, MaxExtension: o.maxExtension,
		HandlerTimeout: o.handlerTimeout, MaxDeliveries: o.maxDeliveries, DeadLetter: o.deadLetter,
		NewBackOff: o.newBackOff, MaxPayload: b.opts.maxPayload,
		AckBatch: b.opts.ackBatch, AckInterval: b.opts.ackInterval,
		Caps: b.caps, Observer: b.opts.observer, Logger: b.opts.logger,
		Handler: handler, Decoder: o.decoder, Health: &s.health,
		ResultTTL: o.resultTTL,
	}
	if cfg.ResultTTL == 0 {
		cfg.ResultTTL = DefaultResultTTL
	}
	if b.events != nil && s.topic != b.opts.events {
		cfg.Event = b.eventHook(s)
	}
	if o.keyOrdering {
		cfg.KeyOrdering = true
		cfg.MaxWaiting = o.waitingBound()
		if l, ok := b.be.(backend.GroupLocker); ok && b.caps.Redelivery && !b.caps.KeyOwnership && !o.broadcast {
			// One member of the group at a time consumes the topic; with
			// KeyOwnership the backend's assignment keeps each key on
			// one member instead.
			cfg.Locker, cfg.LockHolder = l, msgid.New()
			cfg.KeyHold = o.keyHold
		}
	}
	if o.limiter != nil {
		cfg.Limiter = o.limiter
		if fb, ok := o.limiter.(feedbacker); ok {
			cfg.Feedback = append(cfg.Feedback, fb)
		}
	}
	return cfg
}

func (b *Bus) subscribeOptions(topic string, opts []SubscribeOption) (subscribeOptions, error) {
	o := subscribeOptions{
		group:         defaultGroup,
		maxInFlight:   defaultMaxInFlight,
		ackTimeout:    defaultAckTimeout,
		maxDeliveries: defaultMaxDeliveries,
		ackMode:       AckOnSuccess,
		newBackOff:    defaultBackOff,
		maxExtension:  defaultMaxExtension,
	}
	var errs []error
	for _, opt := range opts {
		if opt == nil {
			errs = append(errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		if err := opt.applySubscribe(&o); err != nil {
			errs = append(errs, err)
		}
	}
	if !o.deadLetterSet {
		o.deadLetter = topic + defaultDeadLetterSfx
		if len(o.deadLetter) > backend.MaxTopicLen {
			errs = append(errs, fmt.Errorf("%w: default dead-letter topic %q is too long; set WithDeadLetter", ErrInvalidOption, o.deadLetter))
		}
	}
	if o.deadLetter == topic {
		errs = append(errs, fmt.Errorf("%w: dead-letter topic is the subscribed topic", ErrInvalidOption))
	}
	if o.autoscaleMax > 0 {
		if o.maxInFlightSet {
			errs = append(errs, fmt.Errorf("%w: WithAutoscale and WithMaxInFlight both set the in-flight bound; give one", ErrInvalidOption))
		}
		o.maxInFlight = o.autoscaleMax
	}
	if o.ackMode == AckOnReceive && o.maxDelivSet {
		errs = append(errs, fmt.Errorf("%w: WithMaxDeliveries bounds redeliveries, and AckOnReceive acks before the handler runs, so nothing is redelivered; drop WithMaxDeliveries, or use AckOnSuccess or AckManual", ErrInvalidOption))
	}
	if o.maxWaiting > 0 && !o.keyOrdering {
		errs = append(errs, fmt.Errorf("%w: WithMaxWaiting bounds the deliveries waiting for their key; it needs WithKeyOrdering", ErrInvalidOption))
	}
	if err := o.batchBounds(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.broadcastErrors(b.caps)...)
	errs = append(errs, o.keyHoldErrors(b.be, b.caps)...)
	if o.startFrom == backend.StartOldest && !b.caps.StartOldest {
		errs = append(errs, fmt.Errorf("%w: %s cannot start a group from the oldest message", ErrUnsupported, b.caps.Name))
	}
	if len(errs) > 0 {
		return o, errors.Join(errs...)
	}
	return o, nil
}

// Close closes every subscription as Subscription.Close(ctx) does, waits
// for publishes in progress, then closes the backend. Publish and
// Subscribe return ErrClosed afterwards. Like net/http.Server.Shutdown it
// never blocks past ctx (plus a short grace): when ctx ends first, the
// running handlers' ctx is cancelled with cause ErrClosing, the error says
// what was still running, and that work finishes, or is given back to the
// backend, in the background. A second or concurrent Close waits for the
// first one until its own ctx ends (which also cancels the running
// handlers) and returns nil when the bus closed in time. A handler must
// not call Close; it would wait for itself until ctx ends.
func (b *Bus) Close(ctx context.Context) error {
	idle, first := b.ops.close()
	if !first {
		return b.waitClosed(ctx)
	}
	defer close(b.closed)
	hard, cancel := shutdown.WithGrace(ctx)
	defer cancel()
	subs := b.snapshot(nil)
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Close(ctx)
		}()
	}
	wg.Wait()
	// Publishes and subscribes in progress, and background closes started
	// before Close, end within ctx or are reported.
	if !shutdown.WaitOrDone(hard, idle) {
		errs = append(errs, fmt.Errorf("bus: close: publishes or subscribes still in progress: %w", ctx.Err()))
	}
	// Subscriptions set up concurrently with Close registered after the
	// snapshot; close them too.
	for _, s := range b.snapshot(subs) {
		errs = append(errs, s.Close(ctx))
	}
	if b.events != nil {
		// After the subscriptions, whose last settlements make events,
		// and before the backend, which stores them.
		if err := b.events.Close(ctx, hard); err != nil {
			errs = append(errs, fmt.Errorf("bus: close: %w", err))
		}
	}
	if err := shutdown.CloseBounded(hard, b.be.Close); err != nil {
		errs = append(errs, fmt.Errorf("bus: close backend: %w", err))
	}
	return errors.Join(errs...)
}

// snapshot lists the live subscriptions that are not in seen.
func (b *Bus) snapshot(seen []*Subscription) []*Subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		if !slices.Contains(seen, s) {
			subs = append(subs, s)
		}
	}
	return subs
}

// waitClosed is a Close after the first: it waits for the first to end
// until ctx ends, and then forces the subscriptions still closing.
func (b *Bus) waitClosed(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		for _, s := range b.snapshot(nil) {
			s.run.Force(context.Cause(ctx))
		}
	})
	defer stop()
	hard, cancel := shutdown.WithGrace(ctx)
	defer cancel()
	if !shutdown.WaitOrDone(hard, b.closed) {
		return fmt.Errorf("bus: close: still closing: %w", ctx.Err())
	}
	return nil
}

func (b *Bus) forget(s *Subscription) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

// canPeek reports whether the backend reads topic with Inspector.Peek:
// false when Peek answers ErrUnsupported (an Inspector that can count but
// not read), true otherwise, also when the probe fails for another reason
// (the subscription then meets that error where it reads).
func (b *Bus) canPeek(ctx context.Context, topic string) bool {
	in, ok := b.be.(backend.Inspector)
	if !ok {
		return false
	}
	_, _, err := in.Peek(ctx, topic, "", 1)
	return !errors.Is(err, backend.ErrUnsupported)
}
