package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// row is one outbox row as the relay reads it.
type row struct {
	seq       int64
	topic, id string
	key       []byte
	headers   []byte
	payload   []byte
	deliverAt *time.Time
	expiresAt *time.Time
}

// outcome is what became of a batch's rows.
type outcome struct {
	done    []int64  // published: delete
	dead    []int64  // never publishable: move to the dead table
	reasons []string // of dead, by position
}

const selectBatch = `SELECT seq, topic, id, key, headers, payload, deliver_at, expires_at
	FROM bus_outbox WHERE part = ANY($1) ORDER BY seq LIMIT $2`

// batch publishes the oldest rows of the owned partitions, in order, and
// then deletes them or moves them to the dead table. more reports a full
// batch that went out whole (there may be more right away): its rows are
// then settled in the same round trip as the next read.
func (s *session) batch(ctx context.Context) (more bool, err error) {
	if len(s.owned) == 0 {
		return false, nil
	}
	batch, err := s.read(ctx)
	if err != nil {
		return false, err
	}
	var out outcome
	s.failing = false
	for _, topic := range topicsInOrder(batch) {
		s.publishTopic(ctx, topic, batch, &out)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
	if len(batch) == s.r.o.batch && !s.failing {
		s.unsettled = out
		return true, nil
	}
	return false, s.settle(ctx, out)
}

// read settles what the last batch left unsettled and reads the next
// rows, in one round trip (one implicit transaction: the read does not
// see the deleted rows).
func (s *session) read(ctx context.Context) ([]row, error) {
	b := &pgx.Batch{}
	settling := s.queueSettle(b, s.unsettled)
	b.Queue(selectBatch, s.owned, s.r.o.batch)
	res := s.conn.SendBatch(ctx, b)
	defer res.Close()
	if settling {
		if _, err := res.Exec(); err != nil {
			return nil, fmt.Errorf("delete published rows: %w", err)
		}
		s.unsettled = outcome{}
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.seq, &x.topic, &x.id, &x.key, &x.headers, &x.payload, &x.deliverAt, &x.expiresAt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	return batch, nil
}

// topicsInOrder lists the topics of batch in the order they first appear.
func topicsInOrder(batch []row) []string {
	seen := make(map[string]bool)
	var topics []string
	for _, r := range batch {
		if !seen[r.topic] {
			seen[r.topic] = true
			topics = append(topics, r.topic)
		}
	}
	return topics
}

// publishTopic publishes the rows of batch for topic in one Publish (the
// rows keep their order), and records in out what became of them.
func (s *session) publishTopic(ctx context.Context, topic string, batch []row, out *outcome) {
	var rows []row
	var msgs []*bus.Message
	for _, r := range batch {
		if r.topic != topic {
			continue
		}
		m, err := r.message()
		if err != nil {
			s.kill(ctx, r, err, out)
			continue
		}
		rows, msgs = append(rows, r), append(msgs, m)
	}
	for len(msgs) > 0 {
		err := s.r.pub.Publish(ctx, topic, msgs...)
		var pe *bus.PublishError
		switch {
		case err == nil:
			for _, r := range rows {
				out.done = append(out.done, r.seq)
			}
			s.r.m.published.Add(ctx, int64(len(rows)), metric.WithAttributes(topicKey.String(topic)))
			s.r.pubOutage.Recover(ctx, s.r.o.obs, observer.Event{Scope: observer.ScopePublish})
			return
		case errors.As(err, &pe) && pe.Rejected:
			rows, msgs = s.dropRejected(ctx, rows, msgs, pe, out) // the others were not sent: again
		case isPermanent(err):
			for _, r := range rows {
				s.kill(ctx, r, err, out)
			}
			return
		default:
			s.partial(ctx, topic, rows, pe, err, out)
			return
		}
	}
}

// dropRejected moves the messages validation refused to the dead table
// and returns the others.
func (s *session) dropRejected(ctx context.Context, rows []row, msgs []*bus.Message, pe *bus.PublishError, out *outcome) ([]row, []*bus.Message) {
	bad := make(map[int]error, len(pe.Failed))
	for _, f := range pe.Failed {
		bad[f.Index] = f.Err
	}
	keptRows, keptMsgs := rows[:0:0], msgs[:0:0]
	for i := range rows {
		if err, ok := bad[i]; ok {
			s.kill(ctx, rows[i], err, out)
			continue
		}
		keptRows, keptMsgs = append(keptRows, rows[i]), append(keptMsgs, msgs[i])
	}
	return keptRows, keptMsgs
}

// partial handles a publish that failed for a reason a retry may fix: the
// messages the backend stored are done, the others stay for a retry.
func (s *session) partial(ctx context.Context, topic string, rows []row, pe *bus.PublishError, err error, out *outcome) {
	if ctx.Err() != nil {
		return // closing: the rows stay
	}
	s.failing = true
	s.r.pubOutage.Fail(ctx, s.r.o.obs, observer.Event{Scope: observer.ScopePublish, Topic: topic},
		fmt.Errorf("outbox: relay %q: %w", topic, err))
	if pe == nil {
		return
	}
	failed := make(map[int]bool, len(pe.Failed))
	for _, f := range pe.Failed {
		failed[f.Index] = true
	}
	for i, r := range rows {
		if !failed[i] {
			out.done = append(out.done, r.seq)
		}
	}
}

// kill sends r to the dead table with err as the reason.
func (s *session) kill(ctx context.Context, r row, err error, out *outcome) {
	out.dead = append(out.dead, r.seq)
	out.reasons = append(out.reasons, err.Error())
	s.r.m.dead.Add(ctx, 1, metric.WithAttributes(topicKey.String(r.topic)))
	s.r.o.obs.Observe(ctx, observer.Event{Scope: observer.ScopeDeadLetter, Topic: r.topic, MessageID: r.id,
		Code: string(bus.CodeRejected), Err: fmt.Errorf("outbox: relay %q: row %d moved to bus_outbox_dead: %w", r.topic, r.seq, err)})
}

const settleDone = `DELETE FROM bus_outbox WHERE seq = ANY($1)`

const settleDead = `WITH gone AS (DELETE FROM bus_outbox WHERE seq = ANY($1)),
	r AS (SELECT * FROM unnest($2::bigint[], $3::text[]) AS r(seq, reason)),
	d AS (DELETE FROM bus_outbox o USING r WHERE o.seq = r.seq
		RETURNING o.seq, o.part, o.topic, o.id, o.key, o.headers, o.payload, o.deliver_at, o.expires_at, o.created_at, r.reason)
	INSERT INTO bus_outbox_dead (seq, part, topic, id, key, headers, payload, deliver_at, expires_at, created_at, reason)
	SELECT * FROM d ON CONFLICT (seq) DO NOTHING`

// settle deletes the published rows and moves the dead ones, in one
// statement (so in one transaction), through the session that holds the
// partitions' locks.
func (s *session) settle(ctx context.Context, out outcome) error {
	b := &pgx.Batch{}
	if !s.queueSettle(b, out) {
		return nil
	}
	if err := s.conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("delete published rows: %w", err)
	}
	return nil
}

// queueSettle queues the statement that settles out, if there is one.
func (s *session) queueSettle(b *pgx.Batch, out outcome) bool {
	switch {
	case len(out.dead) > 0:
		b.Queue(settleDead, out.done, out.dead, out.reasons)
	case len(out.done) > 0:
		b.Queue(settleDone, out.done)
	default:
		return false
	}
	return true
}

// message decodes r.
func (r row) message() (*bus.Message, error) {
	m := &bus.Message{ID: r.id, Key: string(r.key), Payload: r.payload}
	if len(r.headers) > 0 {
		if err := json.Unmarshal(r.headers, &m.Headers); err != nil {
			return nil, fmt.Errorf("%w: headers do not decode: %w", bus.ErrInvalidMessage, err)
		}
	}
	if r.deliverAt != nil {
		m.DeliverAt = *r.deliverAt
	}
	if r.expiresAt != nil {
		m.ExpiresAt = *r.expiresAt
	}
	return m, nil
}
