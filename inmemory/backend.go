package inmemory

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/slab"
)

// broker holds the topics. Several Backend handles share one broker when
// they open the same mem://name.
type broker struct {
	opts  Options
	epoch time.Time
	name  string // "" for a private broker
	users int    // open handles of a named broker, guarded by named

	mu     sync.RWMutex
	topics map[string]*topic
	closed bool

	// yield gives up the processor (see topic.yieldIfAhead); tests
	// replace it to count the calls.
	yield func()
	// aheadMax is the backlog in entries past which a publisher yields
	// whatever the limits (see topic.yieldIfAhead).
	aheadMax int

	locks   groupLocks
	parts   partitions
	results results

	// entries and payloads hold the chunks the entries of published
	// messages are carved from and their payloads copied to.
	entries  slab.Runs[entry]
	payloads slab.Chunks
}

func newBroker(opts Options) *broker {
	br := &broker{opts: opts, epoch: time.Now(), topics: map[string]*topic{}, yield: runtime.Gosched, aheadMax: yieldEntries}
	if runtime.GOMAXPROCS(0) == 1 {
		br.aheadMax = yieldEntriesOneProc
	}
	return br
}

// now is the broker clock: monotonic nanoseconds since the broker started.
func (br *broker) now() int64 { return int64(time.Since(br.epoch)) }

// topic returns the topic called name, creating it; nil after shutdown.
func (br *broker) topic(name string) *topic {
	br.mu.RLock()
	t := br.topics[name]
	br.mu.RUnlock()
	if t != nil {
		return t
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.closed {
		return nil
	}
	if t = br.topics[name]; t == nil {
		t = newTopic(br, name)
		br.topics[name] = t
	}
	return t
}

func (br *broker) lookup(name string) *topic {
	br.mu.RLock()
	defer br.mu.RUnlock()
	return br.topics[name]
}

// shutdown drops every topic so their memory can be collected.
func (br *broker) shutdown() {
	br.mu.Lock()
	br.closed = true
	topics := br.topics
	br.topics = nil
	br.mu.Unlock()
	for _, t := range topics {
		t.stopSchedule()
	}
}

// Backend is the in-process backend. Each New or OpenURL returns a Backend
// of its own, even when it shares a named broker with others. It is safe
// for concurrent use.
type Backend struct {
	br     *broker
	closed atomic.Bool
	done   chan struct{} // closed by Close
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Subscription = (*Subscription)(nil)
	_ backend.Extender     = (*Subscription)(nil)
	_ backend.DeadLetterer = (*Subscription)(nil)
	_ backend.Pinger       = (*Backend)(nil)
)

// New returns a Backend over a new private broker. opts may be nil for the
// defaults; an invalid option returns an error wrapping ErrInvalidOption.
func New(opts *Options) (*Backend, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	return newHandle(newBroker(o)), nil
}

func newHandle(br *broker) *Backend {
	return &Backend{br: br, done: make(chan struct{})}
}

// Capabilities reports what the in-process backend guarantees.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:           "mem",
		ConsumerGroups: true,
		Persistent:     false,
		Redelivery:     true,
		NackDelay:      true,
		Ordered:        true,
		StartOldest:    true,
		PublishDedup:   true,
		Extend:         true,
		Scheduling:     true,
		Broadcast:      true,
		Results:        true,
		MaxPayload:     0,
	}
}

// Options returns the options of the broker, defaults filled in.
func (b *Backend) Options() Options { return b.br.opts }

func errClosed(op, topic string) error {
	return fmt.Errorf("inmemory: %s %q: %w", op, topic, backend.ErrClosed)
}

// Publish appends the batch to the topic log atomically: every message is
// stored or none is. It copies the header maps and payloads. When the
// topic's backlog has no room for the whole batch it waits or fails as
// Options.BacklogPolicy says.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.closed.Load() {
		return errClosed("publish", topic)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inmemory: publish %q: %w", topic, err)
	}
	if len(msgs) == 0 {
		return nil
	}
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("inmemory: publish %q: message %d is nil", topic, i)
		}
	}
	opts := b.br.opts
	if len(msgs) > opts.MaxBacklog {
		return fmt.Errorf("inmemory: publish %q: %w: batch of %d is larger than max backlog %d", topic, ErrBacklogFull, len(msgs), opts.MaxBacklog)
	}
	es, bytes := b.br.copyEntries(msgs)
	if bytes > opts.MaxBacklogBytes {
		return fmt.Errorf("inmemory: publish %q: %w: batch of %d bytes is larger than max backlog bytes %d", topic, ErrBacklogFull, bytes, opts.MaxBacklogBytes)
	}
	t := b.br.topic(topic)
	if t == nil {
		return errClosed("publish", topic)
	}
	if backend.DueTimes(msgs) != nil {
		return b.publishHeld(ctx, t, es, bytes)
	}
	if !t.mu.TryLock() {
		if t.offer(es, bytes) {
			t.yieldIfAhead()
			return nil
		}
		t.mu.Lock()
	}
	t.drain()
	es, err := b.waitRoom(ctx, t, es, bytes)
	if err != nil {
		t.unlock()
		return fmt.Errorf("inmemory: publish %q: %w", topic, err)
	}
	if len(es) > 0 {
		t.insert(es)
	}
	t.unlock()
	t.yieldIfAhead()
	return nil
}

// publishHeld stores a batch that has messages with a DeliverAt still to
// come: those wait in the topic's schedule.
func (b *Backend) publishHeld(ctx context.Context, t *topic, es []entry, bytes int64) error {
	t.lock()
	es, err := b.waitRoom(ctx, t, es, bytes)
	if err != nil {
		t.unlock()
		return fmt.Errorf("inmemory: publish %q: %w", t.name, err)
	}
	t.hold(es)
	t.unlock()
	return nil
}

// waitRoom admits the batch es of bytes in total to t's backlog, with mu
// held, waiting for room as the backlog policy says, and returns its
// entries less those the dedup window drops. A topic without a group
// always has room: it drops its oldest entries.
func (b *Backend) waitRoom(ctx context.Context, t *topic, es []entry, bytes int64) ([]entry, error) {
	for {
		if b.closed.Load() {
			return nil, backend.ErrClosed
		}
		kept, ok := t.admitBatch(es, bytes, len(t.glist) > 0)
		if ok {
			return kept, nil
		}
		if b.br.opts.BacklogPolicy == BacklogError {
			return nil, t.fullError()
		}
		es, bytes = kept, sumSize(kept)
		ch := t.waitSpace(len(es), bytes)
		t.unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.lock()
			return nil, fmt.Errorf("waiting for backlog room: %w", ctx.Err())
		case <-b.done:
			t.lock()
			return nil, backend.ErrClosed
		}
		t.lock()
	}
}

// sumSize is what es counts against MaxBacklogBytes.
func sumSize(es []entry) int64 {
	var n int64
	for i := range es {
		n += int64(es[i].size)
	}
	return n
}

// Subscribe joins cfg.Group on topic, creating the group at cfg.StartFrom
// if it does not exist.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	if b.closed.Load() {
		return nil, errClosed("subscribe", topic)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inmemory: subscribe %q: %w", topic, err)
	}
	if cfg.Group == "" {
		return nil, fmt.Errorf("inmemory: subscribe %q: %w: empty group", topic, ErrInvalidOption)
	}
	if cfg.AckTimeout <= 0 {
		return nil, fmt.Errorf("inmemory: subscribe %q: %w: ack timeout %v is not positive", topic, ErrInvalidOption, cfg.AckTimeout)
	}
	t := b.br.topic(topic)
	if t == nil {
		return nil, errClosed("subscribe", topic)
	}
	t.lock()
	defer t.unlock()
	g := t.groups[cfg.Group]
	if g == nil {
		g = t.addGroup(cfg.Group, cfg.StartFrom)
	}
	g.members++
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	return &Subscription{b: b, t: t, g: g, q: g.queue(cfg.AckTimeout), timer: timer, done: make(chan struct{})}, nil
}

// Close closes this Backend. Receive calls of its subscriptions return
// and later calls return errors wrapping backend.ErrClosed. A private
// broker is freed at once; a named one when its last Backend closes.
func (b *Backend) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("inmemory: close: %w", backend.ErrClosed)
	}
	close(b.done)
	releaseBroker(b.br)
	return nil
}

// Ping implements backend.Pinger: the broker is in the process, so it
// answers while the backend is open.
func (b *Backend) Ping(ctx context.Context) error {
	if b.closed.Load() {
		return fmt.Errorf("inmemory: ping: %w", backend.ErrClosed)
	}
	return ctx.Err()
}

// TopicStats is a snapshot of one topic.
type TopicStats struct {
	// Backlog counts the retained entries: not yet settled by every group
	// or, on a topic with no group, kept for a group created later.
	Backlog int
	// BacklogBytes is what the backlog counts against MaxBacklogBytes.
	BacklogBytes int64
	// Window is the span of log offsets from the oldest retained entry to
	// the newest, settled holes included.
	Window int
	// Published is the offset the next entry will get.
	Published uint64
	// Dropped counts entries dropped because the topic had no group and
	// its backlog was full.
	Dropped uint64
	// Groups lists the consumer groups.
	Groups []GroupStats
}

// GroupStats is a snapshot of one consumer group.
type GroupStats struct {
	Name string
	// Members counts the open subscriptions.
	Members int
	// Undelivered counts the entries not yet delivered to the group once.
	Undelivered int
	// Ready counts redeliveries due now; Delayed those waiting for a
	// nack delay.
	Ready, Delayed int
}

// Stats returns a snapshot of topic, and false if the topic does not exist
// (nothing was published or subscribed to it) or the backend is closed.
func (b *Backend) Stats(topic string) (TopicStats, bool) {
	if b.closed.Load() {
		return TopicStats{}, false
	}
	t := b.br.lookup(topic)
	if t == nil {
		return TopicStats{}, false
	}
	t.lock()
	defer t.unlock()
	s := TopicStats{Backlog: int(t.live.Load()), BacklogBytes: t.liveBytes.Load(), Window: int(t.head - t.base), Published: t.head, Dropped: t.dropped}
	for _, g := range t.glist {
		s.Groups = append(s.Groups, GroupStats{
			Name: g.name, Members: g.members, Undelivered: int(t.head - g.cursor),
			Ready: g.ready.len(), Delayed: len(g.delayed),
		})
	}
	return s, true
}
