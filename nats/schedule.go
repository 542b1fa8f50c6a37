package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

// A message published with a DeliverAt still to come
// (backend.HeaderDeliverAt) is stored at the broker apart from the
// topic's ready messages: on the subject schedSubject(topic)+".due" of
// the topic's stream, which the groups' consumers (filtered on the
// topic's subject) never read. One member process of the topic promotes
// it when it is due (promote.go): it stores a copy on the topic's
// subject and then deletes the schedule. So a consumer only ever fetches
// what is due, on every server version, and a delayed message holds no
// slot and none of the consumer's MaxAckPending while it waits.
//
// Schedules are deleted one by one, not purged by subject: on 2.9 a
// purge of part of the subjects of a consumer's filter moves that
// consumer (the promoter's reader) past messages it has not delivered.
//
// The same mechanism runs on every server. nats-server 2.12 added
// message schedules of its own ("Nats-Schedule"), but they fire on a
// quarter-second timer, and a stream that moved from an older server to
// a newer one would hold schedules of both kinds; schedules a server
// holds already (published by earlier versions of this package) are left
// to it: the promoter skips them.
//
// When the stream cannot take the schedule subject (bind-only, interest
// retention, which would drop a schedule that no consumer reads), the
// message is stored at once and the bus gives each early delivery back
// until it is due.

// schedToken is the subject token under the subject prefix that holds the
// schedules: "~" cannot be in a topic, so no topic's subject is under it.
const schedToken = "~sched"

// schedSubject is the prefix of topic's schedule subjects.
func (b *Backend) schedSubject(topic string) string {
	return b.opts.SubjectPrefix + "." + schedToken + "." + topic
}

// schedPattern covers every schedule subject of topic: the promoter's and
// those of the server's own schedules.
func (b *Backend) schedPattern(topic string) string { return b.schedSubject(topic) + ".*" }

// schedulesReady makes sure the stream of topic stores topic's schedule
// subjects, updating a stream made before it did. It reports false when
// the stream cannot (schedules off, interest retention, bind-only): the
// caller then publishes the message at once.
func (b *Backend) schedulesReady(ctx context.Context, tn *topicNames, topic string) bool {
	if !b.caps.Scheduling {
		return false
	}
	if _, ok := b.schedStreams.Load(tn.stream); ok {
		return true
	}
	if b.allowSchedules(ctx, tn.stream, topic) != nil {
		// Asked again next time: the stream may not exist yet, or the
		// server did not answer.
		return false
	}
	b.schedStreams.Store(tn.stream, struct{}{})
	return true
}

// allowSchedules adds topic's schedule subjects to the stream when it
// does not store them yet.
func (b *Backend) allowSchedules(ctx context.Context, stream, topic string) error {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	pattern := b.schedPattern(topic)
	if slices.ContainsFunc(cfg.Subjects, func(s string) bool { return subjectMatches(s, pattern) || s == pattern }) {
		return nil
	}
	if b.opts.BindOnly {
		return errors.New("bind-only: the stream does not store schedules")
	}
	cfg.Subjects = append(cfg.Subjects, pattern)
	_, err = b.js.UpdateStream(ctx, cfg)
	return err
}

// schedDueToken ends the subject the schedules are stored on.
const schedDueToken = "due"

// encodeScheduled builds the schedule of m for topic: m as published
// (with its Nats-Msg-Id, so that the stream drops a republished
// duplicate), on the schedule subject.
func (b *Backend) encodeScheduled(tn *topicNames, topic string, m *backend.Message) (*natsgo.Msg, error) {
	return encode(b.schedSubject(topic)+"."+schedDueToken, m, false, tn.idScope)
}

// scheduledCount counts, in one look at st, the topic's own stream, the
// topic's messages and its schedules (what the stream holds besides the
// topic's messages, which takes in schedules stored on other subjects by
// an earlier version of this package).
func (b *Backend) scheduledCount(ctx context.Context, st jetstream.Stream, topic string) (messages, scheduled backend.Figure, err error) {
	subject := b.subjectFor(topic)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return backend.Unknown, backend.Unknown, fmt.Errorf("count the schedules of %q: %w", topic, err)
	}
	n := info.State.Subjects[subject]
	return backend.Figure(n), backend.Figure(info.State.Msgs - n), nil
}
