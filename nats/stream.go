package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

// ensureStream makes sure the stream that stores topic exists: it binds
// to an existing one, or creates it unless BindOnly is set. Known streams
// are cached; forgetStream drops one from the cache. It returns topic's
// derived names, which every caller goes on to publish with.
func (b *Backend) ensureStream(ctx context.Context, topic string) (*topicNames, error) {
	tn := b.namesFor(topic)
	if b.streamKnown(tn.stream) {
		return tn, nil
	}
	if _, err := b.ensureStreamCreated(ctx, topic); err != nil {
		return nil, err
	}
	return tn, nil
}

// ensureStreamCreated is ensureStream that also reports whether this call
// created the stream.
func (b *Backend) ensureStreamCreated(ctx context.Context, topic string) (bool, error) {
	name := b.namesFor(topic).stream
	if b.streamKnown(name) {
		return false, nil
	}
	created := false
	// Both requests are idempotent: one the cluster loses is asked again
	// (see readAgain) instead of costing the caller's whole deadline.
	var st jetstream.Stream
	err := readAgain(ctx, func(ctx context.Context) (err error) {
		st, err = b.js.Stream(ctx, name)
		return err
	})
	switch {
	case err == nil:
		if err := b.checkSubjects(st, name, topic); err != nil {
			return false, err
		}
	case errors.Is(err, jetstream.ErrStreamNotFound) && b.opts.BindOnly:
		return false, fmt.Errorf("stream %q does not exist and bind-only is set: %w", name, err)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		err = readAgain(ctx, func(ctx context.Context) error {
			_, err := b.js.CreateStream(ctx, b.streamConfig(name, topic))
			return err
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false, fmt.Errorf("create stream %q: %w", name, err)
		}
		created = err == nil
	default:
		return false, fmt.Errorf("look up stream %q: %w", name, err)
	}
	b.streams.Store(name, struct{}{})
	return created, nil
}

// checkSubjects refuses a stream that exists but does not hold topic's
// subject: another bus (another prefix) or another application made it.
// No retry fixes that, so the error is permanent.
func (b *Backend) checkSubjects(st jetstream.Stream, name, topic string) error {
	want := b.subjectFor(topic)
	for _, s := range st.CachedInfo().Config.Subjects {
		if subjectMatches(s, want) {
			return nil
		}
	}
	return backend.Permanent(fmt.Errorf("stream %q exists for subjects %q, not %q: give this bus its own stream_prefix (or stream), or its own prefix", name, st.CachedInfo().Config.Subjects, want))
}

// subjectMatches reports whether the stream subject filter covers subject
// (literal tokens, "*" for one token, ">" for the rest).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// streamKnown reports whether stream name is known to exist. It takes no
// lock: Publish asks on every call.
func (b *Backend) streamKnown(name string) bool {
	_, ok := b.streams.Load(name)
	return ok
}

func (b *Backend) forgetStream(name string) {
	b.streams.Delete(name)
}

func (b *Backend) streamConfig(name, topic string) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:       name,
		Subjects:   b.streamSubjects(topic),
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Replicas:   b.opts.Replicas,
		MaxAge:     b.opts.MaxAge,
		MaxBytes:   -1,
		MaxMsgs:    -1,
		Duplicates: b.opts.Duplicates,
		Discard:    jetstream.DiscardOld,
	}
	if b.opts.Storage == StorageMemory {
		cfg.Storage = jetstream.MemoryStorage
	}
	if b.opts.Retention == RetentionInterest {
		cfg.Retention = jetstream.InterestPolicy
	}
	if b.opts.MaxBytes > 0 {
		cfg.MaxBytes = b.opts.MaxBytes
	}
	if b.opts.MaxMsgs > 0 {
		cfg.MaxMsgs = b.opts.MaxMsgs
	}
	if b.v210 {
		// Features of 2.10 and later, used only where the server has them.
		if b.opts.Compression {
			cfg.Compression = jetstream.S2Compression
		}
		cfg.Metadata = map[string]string{"bus.created-by": "github.com/eventbus-go/bus"}
		if b.opts.StreamMode == StreamPerTopic {
			cfg.Metadata["bus.topic"] = topic
		}
	}
	return cfg
}

// consumerConfig is the durable pull consumer of one group.
func (b *Backend) consumerConfig(topic string, cfg backend.SubscribeConfig) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:       b.consumerFor(topic, cfg.Group),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckTimeout,
		MaxDeliver:    maxDeliver(cfg.MaxDeliveries),
		MaxAckPending: maxAckPending(cfg.MaxInFlight),
		FilterSubject: b.subjectFor(topic),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
	if cfg.StartFrom == backend.StartOldest {
		c.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if b.v210 {
		c.Metadata = map[string]string{"bus.topic": topic, "bus.group": cfg.Group}
	}
	return c
}

// maxDeliver is the server's safety net above the bus's own limit: the bus
// dead-letters at maxDeliveries and must see one more delivery to do so
// when leases ran out, plus room for dead-letter attempts that failed and
// for releasedDeliveries deliveries given back by shutdowns and snoozes,
// which the server counts and the bus does not (see Release and Snooze).
func maxDeliver(maxDeliveries int) int {
	if maxDeliveries <= 0 {
		return -1
	}
	return max(2*maxDeliveries, maxDeliveries+5) + releasedDeliveries
}

// releasedDeliveries is how many uncounted deliveries of one message
// (shutdowns during its handling, snoozes) the server's MaxDeliver leaves
// room for.
const releasedDeliveries = 1000

// maxAckPending bounds the messages the server hands out unacked for a
// group. Each member holds at most maxInFlight; acks travel in batches
// after the slot is freed, so allow for a second member and the batches
// in transit.
func maxAckPending(maxInFlight int) int {
	if maxInFlight <= 0 {
		maxInFlight = 64
	}
	return 2*maxInFlight + 512
}

// resume says where a re-created consumer starts.
type resume struct {
	// afterSeq is the highest stream sequence the member received before
	// the consumer was lost (0: none).
	afterSeq uint64
	// from is set by ensureConsumer to where the new consumer starts.
	from string
}

// ensureConsumer creates the group's durable consumer, or binds to it and
// raises its limits to what this member needs. It reports whether the
// consumer was created. With r set (re-creating a lost consumer) a new
// consumer starts from the start of a stream that had to be re-created
// too (everything in it is new), else after r.afterSeq when the member
// had received messages, so that messages stored while the consumer was
// missing are not skipped and older ones not replayed; otherwise from the
// group's StartFrom.
func (b *Backend) ensureConsumer(ctx context.Context, topic string, cfg backend.SubscribeConfig, r *resume) (bool, error) {
	streamCreated, err := b.ensureStreamCreated(ctx, topic)
	if err != nil {
		return false, err
	}
	stream := b.streamFor(topic)
	want := b.consumerConfig(topic, cfg)
	c, err := b.js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		b.forgetStream(stream)
		if streamCreated, err = b.ensureStreamCreated(ctx, topic); err != nil {
			return false, err
		}
		c, err = b.js.Consumer(ctx, stream, want.Durable)
	}
	if r != nil {
		switch {
		case streamCreated:
			want.DeliverPolicy = jetstream.DeliverAllPolicy
			r.from = "the start of the re-created stream"
		case r.afterSeq > 0:
			want.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			want.OptStartSeq = r.afterSeq + 1
			r.from = fmt.Sprintf("stream sequence %d", want.OptStartSeq)
		default:
			r.from = "the group's start (" + cfg.StartFrom.String() + ")"
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		_, err = b.js.CreateConsumer(ctx, stream, want)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			return false, nil // another member won the race
		}
		if err != nil {
			return false, fmt.Errorf("create consumer %q on stream %q: %w", want.Durable, stream, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("look up consumer %q on stream %q: %w", want.Durable, stream, err)
	}
	return false, b.raiseLimits(ctx, stream, c.CachedInfo().Config, want)
}

// raiseLimits updates the group's consumer to what this member needs,
// never lowering what another member set.
func (b *Backend) raiseLimits(ctx context.Context, stream string, have, want jetstream.ConsumerConfig) error {
	upd := have
	if have.AckWait < want.AckWait {
		// The group's lease is its longest member's: a member with a
		// shorter ack timeout never shortens the others' leases (it only
		// judges its own deliveries stale earlier, which is safe).
		upd.AckWait = want.AckWait
	}
	if have.MaxAckPending < want.MaxAckPending {
		upd.MaxAckPending = want.MaxAckPending
	}
	if have.MaxDeliver != -1 && have.MaxDeliver < want.MaxDeliver {
		upd.MaxDeliver = want.MaxDeliver
	}
	if upd.AckWait != have.AckWait || upd.MaxAckPending != have.MaxAckPending || upd.MaxDeliver != have.MaxDeliver {
		if _, err := b.js.UpdateConsumer(ctx, stream, upd); err != nil {
			return fmt.Errorf("update consumer %q on stream %q: %w", want.Durable, stream, err)
		}
	}
	return nil
}
