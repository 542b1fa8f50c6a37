package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Inspection needs JetStream; core NATS keeps nothing to inspect.
func (b *Backend) inspectable(op string) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: %s: %w", op, backend.ErrClosed)
	}
	if b.opts.CoreNATS {
		return fmt.Errorf("nats: %s: core NATS retains no messages: %w", op, backend.ErrUnsupported)
	}
	return nil
}

// sharedTopics lists the topics of a shared stream from its subjects'
// message counts, with the schedules waiting on each topic's schedule
// subjects.
func (b *Backend) sharedTopics(subjects map[string]uint64) []backend.TopicInfo {
	prefix := b.opts.SubjectPrefix + "."
	sched := map[string]uint64{}
	var out []backend.TopicInfo
	for subj, n := range subjects {
		if rest, ok := strings.CutPrefix(subj, prefix+schedToken+"."); ok {
			if i := strings.LastIndexByte(rest, '.'); i > 0 {
				sched[rest[:i]] += n
			}
			continue
		}
		out = append(out, backend.TopicInfo{Name: strings.TrimPrefix(subj, prefix), Messages: backend.Figure(n), Bytes: backend.Unknown, Published: backend.Unknown, Scheduled: backend.Unknown})
	}
	if !b.caps.Scheduling {
		return out
	}
	for i := range out {
		out[i].Scheduled = backend.Figure(sched[out[i].Name])
		delete(sched, out[i].Name)
	}
	for topic, n := range sched { // only scheduled messages so far
		out = append(out, backend.TopicInfo{Name: topic, Messages: 0, Bytes: backend.Unknown, Published: backend.Unknown, Scheduled: backend.Figure(n)})
	}
	return out
}

// Topics implements backend.Inspector from the streams' state. In a
// shared stream the per-topic counts come from the subject state; bytes,
// times and Published are then unknown. Published is the stream's last
// sequence, for a stream that holds one topic and not its schedules
// (Capabilities.Scheduling, whose messages would count twice: held, then
// due); Unknown otherwise.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	if err := b.inspectable("topics"); err != nil {
		return nil, err
	}
	prefix := b.opts.SubjectPrefix + "."
	var out []backend.TopicInfo
	if b.opts.StreamMode == StreamShared {
		st, err := b.js.Stream(ctx, b.opts.StreamName)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return []backend.TopicInfo{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("nats: topics: %w", err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
		if err != nil {
			return nil, fmt.Errorf("nats: topics: %w", err)
		}
		out = b.sharedTopics(info.State.Subjects)
	} else {
		names := b.js.ListStreams(ctx)
		for info := range names.Info() {
			if !strings.HasPrefix(info.Config.Name, b.opts.StreamPrefix+"_") || len(info.Config.Subjects) == 0 || len(info.Config.Subjects) > 2 {
				continue
			}
			topic, ok := strings.CutPrefix(info.Config.Subjects[0], prefix)
			if !ok {
				continue
			}
			ti := backend.TopicInfo{Name: topic, Messages: backend.Figure(info.State.Msgs), Bytes: backend.Figure(info.State.Bytes), Published: backend.Unknown, Scheduled: backend.Unknown}
			if len(info.Config.Subjects) == 1 {
				// The stream's sequence counts every message stored in
				// it, also those removed since.
				ti.Published = backend.Figure(info.State.LastSeq)
			}
			if len(info.Config.Subjects) == 2 {
				// The second subject holds the topic's schedules: their
				// messages are not the topic's yet.
				if st, err := b.js.Stream(ctx, info.Config.Name); err == nil {
					if m, n, err := b.scheduledCount(ctx, st, topic); err == nil {
						ti.Messages, ti.Scheduled = m, n
					}
				}
			}
			if info.State.Msgs > 0 {
				ti.Oldest, ti.Newest = info.State.FirstTime, info.State.LastTime
			}
			out = append(out, ti)
		}
		if err := names.Err(); err != nil {
			return nil, fmt.Errorf("nats: topics: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b backend.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []backend.TopicInfo{}
	}
	return out, nil
}

// Groups implements backend.Inspector from the consumers' state: pending
// is NumAckPending, lag NumPending. Members of a pull consumer are not
// known to the server, so Consumers is Unknown, and so is the age of the
// oldest pending message.
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	if err := b.inspectable("groups"); err != nil {
		return nil, err
	}
	st, err := b.js.Stream(ctx, b.streamFor(topic))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []backend.GroupInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nats: groups of %q: %w", topic, err)
	}
	subject := b.subjectFor(topic)
	out := []backend.GroupInfo{}
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		if ci.Config.FilterSubject != subject {
			continue
		}
		name := ci.Config.Metadata["bus.group"]
		if name == "" {
			// Before server 2.10 consumers keep no metadata: the group
			// is in the consumer's name.
			name = ci.Name
			if g, ok := b.groupOf(topic, ci.Name); ok {
				name = g
			}
		}
		out = append(out, backend.GroupInfo{
			Name: name, Consumers: backend.Unknown,
			Pending: backend.Figure(ci.NumAckPending), Lag: backend.Figure(ci.NumPending),
		})
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("nats: groups of %q: %w", topic, err)
	}
	slices.SortFunc(out, func(a, b backend.GroupInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Peek implements backend.Inspector by reading stored messages by
// sequence; the cursor is the next stream sequence.
func (b *Backend) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	if err := b.inspectable("peek"); err != nil {
		return nil, "", err
	}
	if n < 1 {
		return nil, "", fmt.Errorf("nats: peek %q: %w: n %d, want >= 1", topic, ErrInvalidOption, n)
	}
	var out []*backend.Message
	next, err := b.scan(ctx, topic, cursor, func(seq uint64, m *backend.Message) bool {
		out = append(out, m)
		return len(out) < n
	})
	if err != nil {
		return nil, "", fmt.Errorf("nats: peek %q: %w", topic, err)
	}
	return out, next, nil
}

// Delete implements backend.Inspector: it finds the listed message IDs
// and deletes their stream messages.
func (b *Backend) Delete(ctx context.Context, topic string, ids []string) (int, error) {
	return b.deleteWhere(ctx, topic, len(ids), backend.HasID(ids))
}

// DeleteCopies removes the messages of topic's stream that equal one of
// msgs in ID and headers (backend.CopyDeleter).
func (b *Backend) DeleteCopies(ctx context.Context, topic string, msgs []*backend.Message) (int, error) {
	return b.deleteWhere(ctx, topic, len(msgs), backend.SameCopy(msgs))
}

// deleteWhere removes the messages of topic's stream that match, reading
// it once; n is how many were asked for (none: no request).
func (b *Backend) deleteWhere(ctx context.Context, topic string, n int, match func(*backend.Message) bool) (int, error) {
	if err := b.inspectable("delete"); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	var seqs []uint64
	if _, err := b.scan(ctx, topic, "", func(seq uint64, m *backend.Message) bool {
		if match(m) {
			seqs = append(seqs, seq)
		}
		return true
	}); err != nil {
		return 0, fmt.Errorf("nats: delete from %q: %w", topic, err)
	}
	st, err := b.js.Stream(ctx, b.streamFor(topic))
	if err != nil {
		return 0, fmt.Errorf("nats: delete from %q: %w", topic, err)
	}
	deleted := 0
	for _, seq := range seqs {
		if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return deleted, fmt.Errorf("nats: delete from %q: %w", topic, err)
		}
		deleted++
	}
	return deleted, nil
}

// scan calls f for the stored messages of topic from the sequence in
// cursor ("" = the first) until f returns false; it returns the cursor of
// the next message, or "" at the end.
func (b *Backend) scan(ctx context.Context, topic, cursor string, f func(uint64, *backend.Message) bool) (string, error) {
	var st jetstream.Stream
	err := readAgain(ctx, func(ctx context.Context) (err error) {
		st, err = b.js.Stream(ctx, b.streamFor(topic))
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var info *jetstream.StreamInfo
	if err := readAgain(ctx, func(ctx context.Context) (err error) {
		info, err = st.Info(ctx)
		return err
	}); err != nil {
		return "", err
	}
	seq := info.State.FirstSeq
	if cursor != "" {
		v, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%w: cursor is not one Peek returned", ErrInvalidOption)
		}
		seq = max(seq, v)
	}
	subject, scope := b.subjectFor(topic), b.idScope(topic)
	for seq > 0 && seq <= info.State.LastSeq {
		// The next message of topic at or after seq: one request per
		// message of the topic, also in a stream shared by every topic.
		var raw *jetstream.RawStreamMsg
		err := readAgain(ctx, func(ctx context.Context) (err error) {
			raw, err = st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		seq = raw.Sequence
		m := &backend.Message{Payload: raw.Data, PublishedAt: raw.Time}
		decodeHeaders(raw.Header, m, scope)
		if !f(seq, m) {
			if seq < info.State.LastSeq {
				return strconv.FormatUint(seq+1, 10), nil
			}
			return "", nil
		}
		seq++
	}
	return "", nil
}

// readTry bounds one idempotent request (an inspection's read, a
// stream's lookup or creation): a request the cluster loses (its
// stream's leader moving, say) is asked again instead of costing the
// caller's whole deadline.
const readTry = 2 * time.Second

// readAgain runs the idempotent read req with a deadline of readTry a
// try, again while a try only ran out of its own time and ctx lives.
func readAgain(ctx context.Context, req func(context.Context) error) error {
	for {
		try, cancel := context.WithTimeout(ctx, readTry)
		err := req(try)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

var _ backend.TopicDeleter = (*Backend)(nil)

// DeleteTopic implements backend.TopicDeleter. With a stream per topic it
// deletes the topic's stream, and with it the consumers (groups) on it. In
// a shared stream it deletes the consumers that read only the topic's
// subject and purges the topic's messages and schedules; the stream
// stays. Either way it forgets the topic's group locks (the promoter's
// among them), partition count and member lists (partition.go);
// the bus deletes the partitions themselves, as topics of their own. Core NATS
// retains nothing, so there is nothing to delete. A subscription still
// live on the topic ends with an error.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: delete topic %q: %w", topic, backend.ErrClosed)
	}
	if b.opts.CoreNATS {
		return nil
	}
	if err := b.deleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("nats: delete topic %q: %w", topic, err)
	}
	if err := b.forgetPartitions(ctx, topic); err != nil {
		return fmt.Errorf("nats: delete topic %q: the partition count: %w", topic, err)
	}
	if err := b.forgetLocks(ctx, topic); err != nil {
		return fmt.Errorf("nats: delete topic %q: the group locks: %w", topic, err)
	}
	return nil
}

func (b *Backend) deleteTopic(ctx context.Context, topic string) error {
	name := b.streamFor(topic)
	if b.opts.StreamMode != StreamShared {
		err := b.js.DeleteStream(ctx, name)
		b.forgetStream(name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	}
	st, err := b.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	subject := b.subjectFor(topic)
	var doomed []string
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		c := info.Config
		if c.FilterSubject == subject || (len(c.FilterSubjects) == 1 && c.FilterSubjects[0] == subject) {
			doomed = append(doomed, info.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return err
	}
	for _, c := range doomed {
		if err := st.DeleteConsumer(ctx, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(b.schedPattern(topic)))
}
