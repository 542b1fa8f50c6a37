package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/eventbus-go/bus/backend"
)

// On nats-server 2.12 and later a message published with a DeliverAt
// still to come (backend.HeaderDeliverAt) is held by the server: it is
// stored as a message schedule ("Nats-Schedule: @at <time>") on a subject
// of its own under schedSubject(topic), in the topic's stream, which
// allows schedules; when it is due the server stores a copy on the
// topic's subject, where the groups' consumers (filtered on that subject)
// find it, and purges the schedule. The copy loses Nats-Msg-Id, so the
// message's ID travels in hdrID too, and its publish time in
// hdrPublished. On older servers, or when the stream cannot be changed to
// allow schedules (bind-only, no right, interest retention), the message is stored at once
// and the bus gives each early delivery back until it is due.

// scheduleMinAhead is how far ahead a DeliverAt must be for the server to
// hold the message as a schedule. A message due sooner is stored at once
// and its early deliveries are held back by the bus, as on older servers:
// it is stored at the broker either way, and the server fires its
// schedules on a timer of a quarter second that made those due within a
// second up to 300 ms late at 10,000 a second.
const scheduleMinAhead = 2 * time.Second

// schedToken is the subject token under the subject prefix that holds the
// schedules: "~" cannot be in a topic, so no topic's subject is under it.
const schedToken = "~sched"

// schedSubject is the prefix of topic's schedule subjects.
func (b *Backend) schedSubject(topic string) string {
	return b.opts.SubjectPrefix + "." + schedToken + "." + topic
}

// schedulesReady makes sure the stream of topic allows message schedules
// on topic's schedule subjects, updating a stream made before it did. It
// reports false when the stream cannot (bind-only, an older stream that
// cannot be changed): the caller then publishes the message at once.
func (b *Backend) schedulesReady(ctx context.Context, tn *topicNames, topic string) bool {
	if !b.v212 || b.opts.Retention == RetentionInterest {
		// An interest stream would drop a schedule at once: no consumer
		// filters on its subject.
		return false
	}
	if v, ok := b.schedStreams.Load(tn.stream); ok {
		return v.(bool)
	}
	ok := b.allowSchedules(ctx, tn.stream, topic) == nil
	b.schedStreams.Store(tn.stream, ok)
	return ok
}

// allowSchedules updates the stream to allow schedules on topic's
// schedule subjects when it does not yet.
func (b *Backend) allowSchedules(ctx context.Context, stream, topic string) error {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	pattern := b.schedSubject(topic) + ".*"
	covered := slices.ContainsFunc(cfg.Subjects, func(s string) bool { return subjectMatches(s, pattern) || s == pattern })
	if cfg.AllowMsgSchedules && covered {
		return nil
	}
	if b.opts.BindOnly {
		return errors.New("bind-only: the stream does not allow schedules")
	}
	cfg.AllowMsgSchedules = true
	if !covered {
		cfg.Subjects = append(cfg.Subjects, pattern)
	}
	_, err = b.js.UpdateStream(ctx, cfg)
	return err
}

// scheduleLead is how long before its DeliverAt a schedule fires. The
// server runs a stream's due schedules at most every 250 ms and stores
// their copies behind the messages being published, so a copy is stored
// up to 250 ms after its time plus the time it takes to store a run's
// copies (tens of milliseconds at 10,000 a second, more on a busy
// server): the copy is stored early by that much and the member that
// receives it holds it until its DeliverAt (see the engine's early
// deliveries). It stays under the 500 ms that a member holds an early
// delivery, by a margin for clocks apart.
const scheduleLead = 400 * time.Millisecond

// encodeScheduled builds the schedule of m, due at due (Unix ms), for
// topic.
func (b *Backend) encodeScheduled(tn *topicNames, topic string, m *backend.Message, due int64) (*natsgo.Msg, error) {
	nm, err := encode(b.schedSubject(topic)+"."+nuid.Next(), m, false, tn.idScope)
	if err != nil {
		return nil, err
	}
	at := time.UnixMilli(due).Add(-scheduleLead)
	nm.Header.Set(jetstream.ScheduleHeader, "@at "+at.UTC().Format(time.RFC3339Nano))
	nm.Header.Set(jetstream.ScheduleTargetHeader, tn.subject)
	nm.Header[hdrID] = []string{m.ID}
	nm.Header[hdrPublished] = []string{strconv.FormatInt(m.PublishedAt.UnixNano(), 10)}
	return nm, nil
}

// scheduledCount is the count of topic's schedules waiting in its stream
// (Unknown when the server has none).
func (b *Backend) scheduledCount(ctx context.Context, st jetstream.Stream, topic string) (backend.Figure, error) {
	if !b.v212 {
		return backend.Unknown, nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(b.schedSubject(topic)+".*"))
	if err != nil {
		return backend.Unknown, fmt.Errorf("count the schedules of %q: %w", topic, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return backend.Figure(n), nil
}
