package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.PendingLister = (*jsSub)(nil)

// PendingDeliveries implements backend.PendingLister. JetStream tells a
// consumer's ack floor and the last stream sequence it delivered, not
// which sequences between them were acked: every message of the topic
// after the floor, up to the last delivered, is listed (read one by one
// with a stream get), acked or not; with nothing pending (NumAckPending
// 0) the list is empty. A lease end is unknown to the server: it is
// given as one AckWait from now, the latest any can end.
func (s *jsSub) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("nats: pending deliveries of %q: %w: max %d", s.topic, ErrInvalidOption, max)
	}
	if s.isClosed() {
		return nil, false, fmt.Errorf("nats: pending deliveries of %q: %w", s.topic, backend.ErrClosed)
	}
	fail := func(err error) ([]backend.Pending, bool, error) {
		return nil, false, fmt.Errorf("nats: pending deliveries of %q: %w", s.topic, err)
	}
	cons, err := s.b.js.Consumer(ctx, s.stream, s.consumer)
	if err != nil {
		return fail(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fail(err)
	}
	if info.NumAckPending == 0 {
		return nil, true, nil
	}
	st, err := s.b.js.Stream(ctx, s.stream)
	if err != nil {
		return fail(err)
	}
	end := time.Now().Add(info.Config.AckWait)
	subject := s.b.subjectFor(s.topic)
	var out []backend.Pending
	for seq, last := info.AckFloor.Stream+1, info.Delivered.Stream; seq <= last; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fail(err)
		}
		if raw.Sequence > last {
			break
		}
		if len(out) == max {
			return out, false, nil
		}
		var m backend.Message
		decodeHeaders(raw.Header, &m, s.idScope)
		out = append(out, backend.Pending{ID: m.ID, Key: m.Key, LeaseEnd: end})
		seq = raw.Sequence + 1
	}
	return out, true, nil
}
