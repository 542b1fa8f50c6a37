package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/observer"
)

// SQS's limits on a receive and on a visibility timeout.
const (
	maxReceive    = 10
	receiveWait   = 1 // seconds a ReceiveMessage waits for a message
	maxVisibility = 12 * time.Hour
)

// subscription is one member of a group: a consumer of the group's queue.
type subscription struct {
	b        *Backend
	topic    string
	queueURL string
	cfg      backend.SubscribeConfig
	// lease is the visibility timeout of a receive and an Extend:
	// cfg.AckTimeout rounded up to whole seconds.
	lease time.Duration

	// ctx ends when the subscription or its backend closes.
	ctx    context.Context
	cancel context.CancelFunc
}

var (
	_ backend.Subscription = (*subscription)(nil)
	_ backend.Extender     = (*subscription)(nil)
)

func newSubscription(b *Backend, topic, queueURL string, cfg backend.SubscribeConfig) *subscription {
	s := &subscription{b: b, topic: topic, queueURL: queueURL, cfg: cfg, lease: visibility(cfg.AckTimeout)}
	s.ctx, s.cancel = context.WithCancel(b.ctx)
	return s
}

// ackID is one delivery: its receipt handle and, kept locally, when its
// lease ends. SQS accepts a receipt handle superseded by a newer receive
// for ChangeMessageVisibility, which would touch the newer delivery, so
// Nack and Extend refuse an id whose lease has ended before any I/O.
//
// The bus may extend a delivery while it nacks it (its lease keeper
// runs apart from the give-back of a closing member). An Extend that
// reached SQS after the Nack would hide again a message the Nack gave
// back, and on a FIFO queue hold its message group's next messages
// behind a message no member has; so the visibility changes of one
// delivery take turns (turn), and an Extend whose turn comes after the
// Nack finds the delivery settled and touches nothing.
type ackID struct {
	handle   string
	received time.Time // before the receive that handed it out
	// body, envelope and attempt are what a copy of the delivery
	// carries (see standardSubscription).
	body, envelope string
	attempt        int

	// turn is held by the visibility change of the delivery under way;
	// made by the first (see takeTurn), as most deliveries are acked
	// without one.
	turn chan struct{}

	mu       sync.Mutex
	deadline time.Time // the lease ends; measured from before the call that set it
	settled  bool      // acked or nacked
}

// live reports whether the delivery may still be nacked or extended.
func (a *ackID) live(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.settled && now.Before(a.deadline)
}

func (a *ackID) settle() {
	a.mu.Lock()
	a.settled = true
	a.mu.Unlock()
}

// visibility returns d in whole seconds, rounded up, within SQS's
// bounds: a visibility is never shorter than asked.
func visibility(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return min((d+time.Second-1)/time.Second*time.Second, maxVisibility)
}

func seconds(d time.Duration) int32 { return int32(d / time.Second) }

// bounded returns a ctx that also ends when the subscription closes.
func (s *subscription) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *subscription) closedErr(op string) error {
	return fmt.Errorf("sqs: %s %q group %q: %w", op, s.topic, s.cfg.Group, backend.ErrClosed)
}

// Receive asks the queue for at most max messages (SQS hands out ten at
// most), waiting up to a second for one. The request runs on its own,
// bounded by the backend's life: when ctx ends or the subscription closes
// first, Receive returns at once and the request, when it still hands
// out messages, makes them visible again (see giveBack).
func (s *subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if s.ctx.Err() != nil {
		return nil, s.closedErr("receive")
	}
	rctx, cancel := s.bounded(ctx)
	defer cancel()
	start := time.Now()
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.queueURL),
		MaxNumberOfMessages:         int32(min(max, maxReceive)),
		WaitTimeSeconds:             receiveWait,
		VisibilityTimeout:           seconds(s.lease),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount},
		MessageAttributeNames:       []string{attrEnvelope, attrCounted},
	}
	if s.b.opts.FIFO {
		// A receive repeated because its answer was lost (see
		// newRetryer) gets the same messages again instead of leaving
		// them, and their message groups, hidden for a lease.
		in.ReceiveRequestAttemptId = aws.String(msgid.New())
	}
	type result struct {
		out *sqs.ReceiveMessageOutput
		err error
	}
	got := make(chan result)
	gone := make(chan struct{})
	if !s.b.startBackground() {
		return nil, s.closedErr("receive")
	}
	go func() {
		defer s.b.bg.Done()
		reqCtx, cancel := context.WithTimeout(s.b.ctx, receiveWait*time.Second+requestGrace)
		defer cancel()
		out, err := s.b.sqs.ReceiveMessage(reqCtx, in)
		select {
		case got <- result{out, err}:
		case <-gone:
			if err == nil {
				s.giveBack(out.Messages)
			}
		}
	}()
	var r result
	select {
	case r = <-got:
	case <-rctx.Done():
		close(gone)
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case s.ctx.Err() != nil, s.b.ctx.Err() != nil: // the backend's ctx ends before its children do
		return nil, s.closedErr("receive")
	case r.err != nil:
		return nil, fmt.Errorf("sqs: receive %q group %q: %w", s.topic, s.cfg.Group, classify(r.err))
	}
	// A receive that long-polled handed its messages out when they came,
	// shortly before its answer: the lease is measured from then, never
	// from before the receive began.
	handedOut := time.Now().Add(-handOutSlack)
	if handedOut.Before(start) {
		handedOut = start
	}
	msgs := make([]*backend.Message, 0, len(r.out.Messages))
	for i := range r.out.Messages {
		m, ok := s.decode(ctx, &r.out.Messages[i], handedOut)
		if ok {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// requestGrace bounds a request beyond the time it asks SQS to wait.
const requestGrace = 10 * time.Second

// handOutSlack is how long before a receive's answer arrived its
// messages are taken to have been handed out, when the receive began
// earlier (it long-polled).
const handOutSlack = 250 * time.Millisecond

// giveBack makes messages that a receive handed out after its caller had
// gone available again at once, so that they wait no lease: on a
// standard queue as copies that count no attempt for this receive (see
// giveBackCopies), on a FIFO queue visible again
// (ChangeMessageVisibilityBatch to 0), where their next receive counts
// one more.
func (s *subscription) giveBack(msgs []sqstypes.Message) {
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.b.ctx, requestGrace)
	defer cancel()
	if !s.b.opts.FIFO {
		if err := s.giveBackCopies(ctx, msgs); err != nil {
			s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.cfg.Group,
				Err: fmt.Errorf("sqs: give back %d messages a cancelled receive got on %q group %q (they return after their lease): %w", len(msgs), s.topic, s.cfg.Group, err)})
		}
		return
	}
	entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, 0, len(msgs))
	for i, m := range msgs {
		entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		})
	}
	_, err := s.b.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
	if err != nil {
		s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.cfg.Group,
			Err: fmt.Errorf("sqs: give back %d messages a cancelled receive got on %q group %q (they return after their lease): %w", len(msgs), s.topic, s.cfg.Group, err)})
	}
}

// decode turns a received SQS message into a bus message. A message the
// bus did not write is dead-lettered, deleted and reported, and decode
// returns false.
func (s *subscription) decode(ctx context.Context, sm *sqstypes.Message, start time.Time) (*backend.Message, bool) {
	id := &ackID{handle: aws.ToString(sm.ReceiptHandle), received: start, deadline: start.Add(s.lease), body: aws.ToString(sm.Body)}
	attempt, _ := strconv.Atoi(sm.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
	if av, ok := sm.MessageAttributes[attrCounted]; ok {
		counted, _ := strconv.Atoi(aws.ToString(av.StringValue))
		attempt += max(counted, 0)
	}
	m := &backend.Message{}
	var err error
	if av, ok := sm.MessageAttributes[attrEnvelope]; !ok || aws.ToString(av.DataType) != "String" {
		err = fmt.Errorf("%w: no %q string attribute", errMalformed, attrEnvelope)
	} else {
		id.envelope = aws.ToString(av.StringValue)
		err = decode(id.envelope, id.body, m)
	}
	if err != nil {
		s.malformed(ctx, sm, id, max(attempt, 1), err)
		return nil, false
	}
	m.AckID = id
	m.Attempt = max(attempt, 1)
	id.attempt = m.Attempt
	return m, true
}

// malformed dead-letters (when the subscription has a dead-letter topic)
// and deletes a message the bus did not write, and reports it.
func (s *subscription) malformed(ctx context.Context, sm *sqstypes.Message, id *ackID, attempt int, cause error) {
	msgID := aws.ToString(sm.MessageId)
	err := fmt.Errorf("sqs: message %s on %q group %q: %w", msgID, s.topic, s.cfg.Group, cause)
	if s.cfg.DeadLetterTopic != "" {
		raw := &backend.Message{ID: msgID, Payload: []byte(aws.ToString(sm.Body)), PublishedAt: time.Now()}
		dl := backend.NewDeadLetter(raw, backend.DeadLetterInfo{
			Topic: s.topic, Group: s.cfg.Group, Attempt: attempt, Code: backend.CodeMalformed, Reason: cause.Error(),
		})
		if perr := s.b.Publish(ctx, s.cfg.DeadLetterTopic, []*backend.Message{dl}); perr != nil {
			s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeDecode, Topic: s.topic, Group: s.cfg.Group, MessageID: msgID, Attempt: attempt,
				Err: fmt.Errorf("%w; dead-lettering it: %w", err, perr)})
			return // left to its lease, and tried again
		}
	}
	if derr := s.Ack(ctx, []backend.AckID{id}); derr != nil {
		err = fmt.Errorf("%w; deleting it: %w", err, derr)
	}
	s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeDecode, Topic: s.topic, Group: s.cfg.Group, MessageID: msgID, Attempt: attempt, Err: err})
}

// Ack deletes the messages with DeleteMessageBatch, ten a call. A
// receipt handle SQS no longer knows is a message already deleted.
func (s *subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	var errs []error
	for from := 0; from < len(ids); from += maxReceive {
		chunk := ids[from:min(from+maxReceive, len(ids))]
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, 0, len(chunk))
		for i, raw := range chunk {
			a := raw.(*ackID)
			entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(a.handle)})
		}
		out, err := s.b.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		failed := map[int]bool{}
		for _, f := range out.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			if aws.ToString(f.Code) == "ReceiptHandleIsInvalid" {
				continue
			}
			failed[i] = true
			errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
		for i, raw := range chunk {
			if !failed[i] {
				raw.(*ackID).settle()
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sqs: ack %q group %q: %w", s.topic, s.cfg.Group, classify(errors.Join(errs...)))
	}
	return nil
}

// Nack makes the message visible again after delay (whole seconds,
// rounded up) with ChangeMessageVisibility; its next receive counts one
// more. SQS ends a message's visibility at most twelve hours after the
// receive that handed it out, so a longer delay is cut to what is left
// of those twelve hours.
func (s *subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	a := id.(*ackID)
	left := maxVisibility - time.Since(a.received) - time.Second
	vis := min(visibility(delay), max(left/time.Second*time.Second, 0))
	return s.changeVisibility(ctx, "nack", a, vis, func(time.Time) { a.settled = true })
}

// Extend restarts the lease with ChangeMessageVisibility.
func (s *subscription) Extend(ctx context.Context, id backend.AckID) error {
	a := id.(*ackID)
	return s.changeVisibility(ctx, "extend", a, s.lease, func(start time.Time) {
		if !a.settled {
			a.deadline = start.Add(s.lease)
		}
	})
}

// takeTurn returns a's turn, making it on the first call.
func (a *ackID) takeTurn() chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turn == nil {
		a.turn = make(chan struct{}, 1)
	}
	return a.turn
}

// changeVisibility sets the visibility of a's message to vis in a's turn
// (see ackID), when a is still live, and then runs done under a.mu with
// the time the request started.
func (s *subscription) changeVisibility(ctx context.Context, op string, a *ackID, vis time.Duration, done func(start time.Time)) error {
	turn := a.takeTurn()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return fmt.Errorf("sqs: %s %q group %q: %w", op, s.topic, s.cfg.Group, ctx.Err())
	}
	start := time.Now()
	if !a.live(start) {
		return fmt.Errorf("sqs: %s %q group %q: %w", op, s.topic, s.cfg.Group, backend.ErrStale)
	}
	_, err := s.b.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.queueURL), ReceiptHandle: aws.String(a.handle), VisibilityTimeout: seconds(vis),
	})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && (ae.ErrorCode() == "ReceiptHandleIsInvalid" || ae.ErrorCode() == "MessageNotInflight" ||
			ae.ErrorCode() == "AWS.SimpleQueueService.MessageNotInflight") {
			return fmt.Errorf("sqs: %s %q group %q: %w: %w", op, s.topic, s.cfg.Group, backend.ErrStale, err)
		}
		return fmt.Errorf("sqs: %s %q group %q: %w", op, s.topic, s.cfg.Group, classify(err))
	}
	a.mu.Lock()
	done(start)
	a.mu.Unlock()
	return nil
}

// Close stops the member; a Receive in progress returns at once.
// Unsettled messages come back when their visibility timeout ends.
func (s *subscription) Close() error {
	s.cancel()
	return nil
}

// classify marks the errors no retry fixes: a queue or topic that no
// longer exists, a request AWS refuses for its credentials.
func classify(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NotFound",
			"AccessDenied", "AccessDeniedException", "AuthorizationError", "InvalidClientTokenId", "UnrecognizedClientException":
			return backend.Permanent(err)
		}
	}
	return err
}
