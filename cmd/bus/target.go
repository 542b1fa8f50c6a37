package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

// target is what a bench run drives: the bus, or a raw client as its
// baseline. Its methods may be called from several goroutines at once.
type target interface {
	// backend names the backend ("mem", "redis", "nats").
	backend() string
	// client names what is driven: "bus", or the raw client.
	client() string
	// prepare readies the target for scenario; for the consume scenario
	// it creates the group before the prefill (starting from the oldest
	// message where the backend can, so that it owes every message of
	// the topic).
	prepare(ctx context.Context, scenario string) error
	// publisher returns a publisher for one publishing goroutine.
	publisher(ctx context.Context) (publisher, error)
	// subscribe starts consuming with the group and passes every payload
	// to h, which may run on several goroutines at once and must not
	// keep the slice.
	subscribe(ctx context.Context, h func([]byte)) (consumer, error)
	// close releases what the target opened (and what it created, for a
	// raw client).
	close(ctx context.Context) error
}

// publisher publishes batches for one goroutine.
type publisher interface {
	// publish returns nil once every payload is accepted with the
	// guarantee of bus.Publish returning nil. It may reuse nothing of
	// payloads after it returns.
	publish(ctx context.Context, payloads [][]byte) error
}

// consumer is a running subscription.
type consumer interface {
	// done is closed when the consumer ends on its own, such as on a
	// permanent error.
	done() <-chan struct{}
	// stop ends the consumer and flushes its acks.
	stop(ctx context.Context) error
	// err is why the consumer ended on its own, or nil.
	err() error
}

// openTarget opens the target of a run; r receives background errors.
type openTarget func(ctx context.Context, r *benchRun) (target, error)

// busTarget drives the bus.
type busTarget struct {
	b     *bus.Bus
	r     *benchRun
	url   string
	extra []*bus.Bus // the other members of a keyed run
}

func openBusTarget(ctx context.Context, r *benchRun) (target, error) {
	u := benchURL(r.cfg)
	if r.cfg.Scenario == scenarioKeyed {
		u = keyedURL(r.cfg, r.nonce)
	}
	opts := []bus.Option{bus.WithObserver(observer.Func(r.observe))}
	if r.cfg.Events != "" {
		opts = append(opts, bus.WithEvents(r.cfg.Events))
	}
	if r.cfg.AsyncWindow > 0 {
		opts = append(opts, bus.WithPublishBatching(bus.PublishBatching{Window: r.cfg.AsyncWindow}))
	}
	b, err := bus.Open(ctx, u, opts...)
	if err != nil {
		return nil, err
	}
	return &busTarget{b: b, r: r, url: u}, nil
}

// benchURL is the URL the bus side opens. The consume scenario keeps the
// whole prefill in the backend, so on a private mem:// broker whose URL
// sets no backlog limit the limits are raised to hold -n messages.
func benchURL(cfg benchConfig) string {
	if cfg.Scenario != scenarioConsume {
		return cfg.URL
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "mem" || u.Host != "" {
		return cfg.URL // bus.Open reports a bad URL; a named broker keeps its own options
	}
	q := u.Query()
	if q.Has("max_backlog") || q.Has("max_backlog_bytes") {
		return cfg.URL
	}
	q.Set("max_backlog", strconv.Itoa(max(cfg.N, inmemory.DefaultMaxBacklog)))
	q.Set("max_backlog_bytes", strconv.FormatInt(max(memBacklogBytes(cfg), inmemory.DefaultMaxBacklogBytes), 10))
	base, _, _ := strings.Cut(cfg.URL, "?") // u.String() would drop the "//" of mem://
	return base + "?" + q.Encode()
}

// memBacklogBytes is a mem:// backlog byte limit that holds -n messages:
// the backend counts payload, ID, key and headers plus 256 bytes of
// bookkeeping per entry.
func memBacklogBytes(cfg benchConfig) int64 {
	return int64(cfg.N) * int64(cfg.Size+512)
}

func (t *busTarget) backend() string {
	if name := t.b.Capabilities().Name; name != "" {
		return name
	}
	if u, err := url.Parse(t.url); err == nil {
		return u.Scheme
	}
	return "unknown"
}

func (t *busTarget) client() string { return "bus" }

func (t *busTarget) prepare(ctx context.Context, scenario string) error {
	if t.r.cfg.Scenario == scenarioKeyed && t.r.cfg.Partitions > 1 {
		return t.b.CreateTopic(ctx, t.r.topic, t.r.cfg.Partitions)
	}
	if scenario != scenarioConsume {
		return nil
	}
	if !t.b.Capabilities().StartOldest {
		// The group, created before the prefill, keeps every message
		// published after it; the run's member then joins it at the
		// newest message, which is where the group stands.
		if err := t.b.CreateGroup(ctx, t.r.topic, t.group()); err != nil {
			return fmt.Errorf("create group: %w", err)
		}
		return nil
	}
	// Messages already on the topic that this short-lived member takes
	// are counted (as foreign) like any other.
	sub, err := t.sub(ctx, t.handler(t.r.handle))
	if err != nil {
		return err
	}
	if err := sub.Close(ctx); err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	return nil
}

func (t *busTarget) sub(ctx context.Context, h bus.Handler) (*bus.Subscription, error) {
	return t.subOn(ctx, t.b, h)
}

// group is the run's consumer group.
func (t *busTarget) group() string { return t.r.group() }

// subOn subscribes the run's group on b.
func (t *busTarget) subOn(ctx context.Context, b *bus.Bus, h bus.Handler) (*bus.Subscription, error) {
	from := bus.StartNewest
	if t.r.cfg.Scenario == scenarioConsume && b.Capabilities().StartOldest {
		from = bus.StartOldest
	}
	opts := []bus.SubscribeOption{
		bus.WithGroup(t.group()),
		bus.WithStartFrom(from),
		bus.WithAckMode(t.r.cfg.AckMode),
	}
	if t.r.cfg.AutoscaleMax > 0 {
		opts = append(opts, bus.WithAutoscale(1, t.r.cfg.AutoscaleMax))
	} else {
		opts = append(opts, bus.WithMaxInFlight(t.r.cfg.MaxInFlight))
	}
	if t.r.cfg.Scenario == scenarioKeyed {
		opts = append(opts, bus.WithKeyOrdering())
	}
	return b.Subscribe(ctx, t.r.topic, h, opts...)
}

// handler runs h on each payload and settles as the ack mode wants.
func (t *busTarget) handler(h func([]byte)) bus.Handler {
	manual := t.r.cfg.AckMode == bus.AckManual
	return func(ctx context.Context, d *bus.Delivery) error {
		h(d.Payload)
		if manual {
			return d.Ack(ctx)
		}
		return nil
	}
}

func (t *busTarget) subscribe(ctx context.Context, h func([]byte)) (consumer, error) {
	if t.r.cfg.Scenario == scenarioKeyed {
		h = t.keyedHandler(h)
	} else if delay := t.r.cfg.HandlerDelay; delay > 0 {
		next := h
		h = func(p []byte) {
			time.Sleep(delay) // the I/O of a backlog run's handler
			next(p)
		}
	}
	sub, err := t.sub(ctx, t.handler(h))
	if err != nil {
		return nil, err
	}
	if t.r.cfg.Scenario != scenarioKeyed {
		return busConsumer{sub}, nil
	}
	more, err := t.members(ctx, t.handler(h))
	all := append(manyConsumers{sub}, more...)
	if err != nil {
		return nil, errors.Join(err, all.stop(ctx))
	}
	return all, nil
}

// close deletes the topic when the run made it up (no --topic), so a run
// against a real broker leaves nothing behind, then closes the bus. A
// topic that cannot be deleted (no backend.TopicDeleter, or no right to)
// is counted with the run's background errors, not as a failure.
func (t *busTarget) close(ctx context.Context) error {
	if t.r.cfg.Topic == "" {
		if err := t.b.DeleteTopic(ctx, t.r.topic); err != nil && !errors.Is(err, bus.ErrUnsupported) {
			t.r.note("delete the run's topic: " + err.Error())
		}
	}
	errs := []error{t.b.Close(ctx)}
	for _, b := range t.extra {
		errs = append(errs, b.Close(ctx))
	}
	return errors.Join(errs...)
}

// busPublisher publishes through the bus with reused messages.
type busPublisher struct {
	b     *bus.Bus
	topic string
	msgs  []bus.Message
	ptrs  []*bus.Message
	epoch time.Time    // set in the delayed scenario: each payload's stamp is its DeliverAt since epoch
	cfg   *benchConfig // set in the keyed scenario: each message has its sequence number's key
	ids   bool         // each message has an ID of its own (--caller-ids)
}

func (t *busTarget) publisher(context.Context) (publisher, error) {
	if t.r.cfg.AsyncWindow > 0 {
		return &busAsyncPublisher{b: t.b, topic: t.r.topic}, nil
	}
	p := &busPublisher{b: t.b, topic: t.r.topic, msgs: make([]bus.Message, t.r.cfg.Batch), ptrs: make([]*bus.Message, t.r.cfg.Batch)}
	if t.r.cfg.Scenario == scenarioDelayed {
		p.epoch = t.r.epoch
	}
	if t.r.cfg.Scenario == scenarioKeyed {
		p.cfg = &t.r.cfg
	}
	p.ids = t.r.cfg.CallerIDs
	for i := range p.msgs {
		p.ptrs[i] = &p.msgs[i]
	}
	return p, nil
}

func (p *busPublisher) publish(ctx context.Context, payloads [][]byte) error {
	for i, pl := range payloads {
		p.msgs[i].ID = "" // the bus assigns a fresh ID, as for any application message
		if p.ids {
			p.msgs[i].ID = callerID(binary.LittleEndian.Uint64(pl))
		}
		p.msgs[i].Payload = pl
		if !p.epoch.IsZero() {
			p.msgs[i].DeliverAt = p.epoch.Add(time.Duration(binary.LittleEndian.Uint64(pl[8:])))
		}
		if p.cfg != nil {
			p.msgs[i].Key = p.cfg.keyOf(binary.LittleEndian.Uint64(pl) & seqMask)
		}
	}
	return p.b.Publish(ctx, p.topic, p.ptrs[:len(payloads)]...)
}

// callerID is the ID --caller-ids gives the message of stamp v (the run's
// nonce and the sequence number): UUID-shaped, 36 bytes, as most callers'
// IDs are.
func callerID(v uint64) string {
	return fmt.Sprintf("%08x-%04x-%04x-8000-000000000000", v>>32, v>>16&0xffff, v&0xffff)
}

type busConsumer struct{ s *bus.Subscription }

func (c busConsumer) done() <-chan struct{} { return c.s.Done() }

func (c busConsumer) stop(ctx context.Context) error { return c.s.Close(ctx) }

func (c busConsumer) err() error { return c.s.Err() }
