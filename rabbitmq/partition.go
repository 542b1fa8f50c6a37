package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

var _ backend.Partitioner = (*Backend)(nil)

// A topic's partition count and a group's members are kept in streams
// (x-queue-type stream), which many readers read without taking anything
// off: a caller appends a record, confirmed, and reads the stream up to
// its own record. Every caller reads the same records in the same order,
// so the first count recorded is the count every caller gets, and the
// last record of each member says whether it is live.

// partsName is the stream of topic's partition counts: "bus.parts.<topic>"
// (topics are at most 200 bytes).
func (b *Backend) partsName(topic string) string { return b.opts.Prefix + ".parts." + topic }

// membersName is the stream of the heartbeats of group on topic:
// "bus.members.<topic>/<group>", hashed as queueName does.
func (b *Backend) membersName(topic, group string) string {
	return b.groupName("members", topic, group)
}

// Arguments of the streams. A members stream keeps its records about
// membersRetention, in segments of membersSegment bytes (the unit the
// retention deletes); a parts stream keeps every record.
const (
	membersRetention = "10m"
	membersSegment   = 1 << 20
)

// memberLookback is how far back a members read starts at least: the
// records of the last memberLookback (or twice the caller's ttl, when
// longer) decide who is live. A heartbeat's ttl is exact up to it.
const memberLookback = 10 * time.Second

// streamSlack covers the stream offset's granularity: a read by time
// starts at a chunk's timestamp, in whole seconds of the broker's clock.
const streamSlack = 2 * time.Second

// Headers of the records of a members stream.
const (
	hdrMember = "bus-member"
	hdrKind   = "bus-kind"
	hdrUntil  = "bus-until" // Unix ms of the writer's clock
)

// Kinds of members records: a heartbeat, a leave, and the mark a read
// without a heartbeat appends to know where the stream ends.
const (
	kindBeat  = "beat"
	kindLeave = "leave"
	kindMark  = "mark"
)

// Partitions implements backend.Partitioner. A count is a record in the
// topic's parts stream; the first record of a count above 0 is the
// topic's count. A caller appends its own (0 when it only reads) and reads
// the stream from its first record up to that one, so that two callers
// that record different counts at once both read the one that came first.
// A count once read is kept by the backend: it never changes.
func (b *Backend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	if err := backend.ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("rabbitmq: partitions of %q: %w", topic, err)
	}
	if n < 0 || n > backend.MaxPartitions {
		return 0, fmt.Errorf("rabbitmq: partitions of %q: %w: %d partitions, want 0 to %d", topic, backend.ErrInvalidOption, n, backend.MaxPartitions)
	}
	if b.isShut() {
		return 0, fmt.Errorf("rabbitmq: partitions of %q: %w", topic, backend.ErrClosed)
	}
	if c, ok := b.parts.Load(topic); ok {
		return c.(int), nil
	}
	q := b.partsName(topic)
	args := amqp.Table{"x-queue-type": "stream"}
	if n == 0 {
		// A read does not create the stream: no stream, no count.
		exists, err := b.streamExists(ctx, q)
		if err != nil || !exists {
			return 0, wrapErr(fmt.Sprintf("partitions of %q", topic), err)
		}
	}
	recs, err := b.appendAndRead(ctx, q, args, "first", amqp.Publishing{Body: []byte(strconv.Itoa(n))}, func(d amqp.Delivery) bool {
		return partsCount(d) > 0
	})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: partitions of %q: %w", topic, err)
	}
	for _, r := range recs {
		if c := partsCount(r); c > 0 {
			b.parts.Store(topic, c)
			return c, nil
		}
	}
	return 0, nil
}

// partsCount returns the count a parts record carries, or 0 for a record
// of a read or one that does not decode.
func partsCount(d amqp.Delivery) int {
	if c, err := strconv.Atoi(string(d.Body)); err == nil && c > 0 && c <= backend.MaxPartitions {
		return c
	}
	return 0
}

// Heartbeat implements backend.Partitioner: the heartbeat is a record of
// the group's members stream carrying the time the member is live until
// (by its writer's clock: the members' clocks are taken to agree), and the
// live members are those whose last record in the stream is a heartbeat
// whose time has not passed.
func (b *Backend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	if member == "" || ttl <= 0 {
		return nil, fmt.Errorf("rabbitmq: heartbeat of group %q on %q: %w: member %q, ttl %v", group, topic, backend.ErrInvalidOption, member, ttl)
	}
	until := time.Now().Add(ttl).UnixMilli()
	return b.members(ctx, topic, group, kindBeat, member, until, ttl)
}

// Members implements backend.Partitioner. It appends a mark to the
// group's members stream to know where the stream ends.
func (b *Backend) Members(ctx context.Context, topic, group string) ([]string, error) {
	return b.members(ctx, topic, group, kindMark, "", 0, 0)
}

// Leave implements backend.Partitioner: a leave record, confirmed, after
// which no read counts member live until its next heartbeat.
func (b *Backend) Leave(ctx context.Context, topic, group, member string) error {
	if err := validateMembers(topic, group); err != nil {
		return err
	}
	if member == "" {
		return fmt.Errorf("rabbitmq: leave group %q on %q: %w: empty member", group, topic, backend.ErrInvalidOption)
	}
	if b.isShut() {
		return fmt.Errorf("rabbitmq: leave group %q on %q: %w", group, topic, backend.ErrClosed)
	}
	q := b.membersName(topic, group)
	rec := amqp.Publishing{Headers: amqp.Table{hdrMember: member, hdrKind: kindLeave}}
	if err := b.appendRecord(ctx, q, membersArgs(), rec); err != nil {
		return fmt.Errorf("rabbitmq: leave group %q on %q: %w", group, topic, err)
	}
	return nil
}

func (b *Backend) members(ctx context.Context, topic, group, kind, member string, until int64, ttl time.Duration) ([]string, error) {
	if err := validateMembers(topic, group); err != nil {
		return nil, err
	}
	if b.isShut() {
		return nil, fmt.Errorf("rabbitmq: members of group %q on %q: %w", group, topic, backend.ErrClosed)
	}
	from := time.Now().Add(-max(memberLookback, 2*ttl) - streamSlack)
	rec := amqp.Publishing{Headers: amqp.Table{hdrMember: member, hdrKind: kind, hdrUntil: until}}
	recs, err := b.appendAndRead(ctx, b.membersName(topic, group), membersArgs(), from, rec, nil)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: members of group %q on %q: %w", group, topic, err)
	}
	last := map[string]amqp.Delivery{}
	for _, r := range recs {
		if m, _ := r.Headers[hdrMember].(string); m != "" {
			last[m] = r
		}
	}
	now := time.Now().UnixMilli()
	ms := []string{}
	for m, r := range last {
		if k, _ := r.Headers[hdrKind].(string); k != kindBeat {
			continue
		}
		if u, _ := r.Headers[hdrUntil].(int64); u > now {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	return ms, nil
}

func membersArgs() amqp.Table {
	return amqp.Table{
		"x-queue-type":                    "stream",
		"x-max-age":                       membersRetention,
		"x-stream-max-segment-size-bytes": membersSegment,
	}
}

// Stream records travel on their own connection (Backend.streams). The
// broker answers a stream's declaration before the stream has started,
// and until it has, a publish to it or a consume from it closes the
// channel (506 "stream not found", 406 "no replica on the local node")
// or crashes the channel's process, which ends the whole connection
// (541). So a record is published only on a channel whose consume of the
// stream the broker took, and a stream operation that meets a closed
// channel or connection runs again (retryStream): such a crash never
// reaches the publishes and settlements on the other connections.

// appendAndRead declares the stream q, consumes it from offset (a stream
// offset: "first" or a time), appends rec and returns the records read
// up to rec, rec last, or up to the first record for which enough holds,
// all on one channel. rec is not confirmed: reading it back is the
// proof that it is stored. An attempt that fails on a closed channel
// runs again with the same record: a record read twice reads as once (a
// reader keeps the first count, and a member's last record).
func (b *Backend) appendAndRead(ctx context.Context, q string, args amqp.Table, offset any, rec amqp.Publishing, enough func(amqp.Delivery) bool) ([]amqp.Delivery, error) {
	rec.MessageId = msgid.New()
	rec.DeliveryMode = amqp.Persistent
	var recs []amqp.Delivery
	err := retryStream(ctx, func() error {
		return b.streams.use(ctx, func(ch *amqp.Channel) error {
			if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
				return err
			}
			dels, err := consumeStream(ch, q, streamReadPrefetch, offset)
			if err != nil {
				return err
			}
			if err := ch.Publish("", q, false, false, rec); err != nil {
				return err
			}
			recs, err = readUntil(ctx, q, dels, func(d amqp.Delivery) bool {
				return d.MessageId == rec.MessageId || enough != nil && enough(d)
			})
			return err
		})
	})
	if err != nil {
		// A read whose ctx ended may still be writing recs.
		return nil, err
	}
	return recs, nil
}

// appendRecord declares the stream q and appends rec to it, confirmed,
// running again as appendAndRead does.
func (b *Backend) appendRecord(ctx context.Context, q string, args amqp.Table, rec amqp.Publishing) error {
	rec.DeliveryMode = amqp.Persistent
	return retryStream(ctx, func() error {
		return b.streams.use(ctx, func(ch *amqp.Channel) error {
			if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
				return err
			}
			if _, err := consumeStream(ch, q, 1, "next"); err != nil {
				return err
			}
			if err := ch.Confirm(false); err != nil {
				return err
			}
			conf, err := ch.PublishWithDeferredConfirm("", q, false, false, rec)
			if err != nil {
				return err
			}
			ok, err := conf.WaitContext(ctx)
			switch {
			case err != nil:
				return err
			case ok:
				return nil
			case ch.IsClosed():
				return errUnconfirmed
			default:
				return errNacked
			}
		})
	})
}

// streamRetry is how retryStream runs an operation again.
var streamRetry = backoffPolicy{first: 5 * time.Millisecond, most: 200 * time.Millisecond, total: 10 * time.Second}

// retryStream runs f until it returns nil or an error other than a
// stream's that has not started or a closed channel or connection, as
// streamRetry says, bounded by ctx.
func retryStream(ctx context.Context, f func() error) error {
	return retry(ctx, streamRetry, streamNotReady, f)
}

// streamNotReady reports whether err is what a stream that has not
// started gives: a nack, a channel or connection closed by the broker
// (406, 506, 541), or a closed channel or connection (connClosed).
func streamNotReady(err error) bool {
	return errors.Is(err, errNacked) || errors.Is(err, errUnconfirmed) || connClosed(err) ||
		isAMQPCode(err, amqp.PreconditionFailed, amqp.ResourceError, amqp.InternalError)
}

// streamReadPrefetch is the credit of a stream read.
const streamReadPrefetch = 256

// consumeStream consumes the stream q on ch from offset with a credit of
// prefetch records. The broker refuses it until the stream has started.
func consumeStream(ch *amqp.Channel, q string, prefetch int, offset any) (<-chan amqp.Delivery, error) {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, err
	}
	return ch.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": offset})
}

// readUntil reads the records of the stream q from dels until one for
// which last holds, and returns the records read, bounded by ctx.
func readUntil(ctx context.Context, q string, dels <-chan amqp.Delivery, last func(amqp.Delivery) bool) ([]amqp.Delivery, error) {
	var recs []amqp.Delivery
	for n := 1; ; n++ {
		select {
		case d, ok := <-dels:
			if !ok {
				return nil, fmt.Errorf("read %q: %w", q, amqp.ErrClosed)
			}
			recs = append(recs, d)
			if last(d) {
				return recs, nil
			}
			if n%(streamReadPrefetch/2) == 0 {
				_ = d.Ack(true) // credit for the rest
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// streamExists reports whether the queue q exists.
func (b *Backend) streamExists(ctx context.Context, q string) (bool, error) {
	err := b.streams.use(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err
	})
	if isAMQPCode(err, amqp.NotFound) {
		return false, nil
	}
	return err == nil, err
}

// wrapErr prefixes a non-nil err with what failed.
func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rabbitmq: %s: %w", what, err)
}

func validateMembers(topic, group string) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("rabbitmq: members of group %q on %q: %w", group, topic, err)
	}
	if group == "" {
		return fmt.Errorf("rabbitmq: members of group %q on %q: %w: empty group", group, topic, backend.ErrInvalidOption)
	}
	return nil
}

// isShut reports whether Close has been called.
func (b *Backend) isShut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// validateStoredTopic validates a topic the bus stores: a user's topic or
// a partition of one (backend.PartitionTopic).
func validateStoredTopic(topic string) error {
	if t, _, ok := backend.SplitPartitionTopic(topic); ok {
		topic = t
	}
	return backend.ValidateTopic(topic)
}
