package sqs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventbus-go/bus/backend"
)

// attrCounted names the message attribute of a copy that Release or
// Snooze sent: how many attempts the message had counted before the
// copy, in decimal. A copy's Attempt is that plus its own receive count.
const attrCounted = "bus-counted"

// maxDelaySeconds is SQS's longest per-message delay, 15 minutes.
const maxDelaySeconds = 900

// standardSubscription is a member of a group on a standard queue: it
// gives deliveries back without counting an attempt (backend.Releaser,
// backend.Snoozer) by sending the queue a copy that carries the attempts
// counted so far, then deleting the delivery. FIFO queues have no such
// subscription: a copy would go behind the later messages of its group,
// and a FIFO queue takes no per-message delay.
type standardSubscription struct {
	*subscription
}

var (
	_ backend.Releaser = standardSubscription{}
	_ backend.Snoozer  = standardSubscription{}
)

// Release makes the message available to its group again at once, with
// the same Attempt on its next delivery.
func (s standardSubscription) Release(ctx context.Context, id backend.AckID) error {
	return s.giveBackCopy(ctx, "release", id.(*ackID), 0)
}

// Snooze makes the message available to its group again after delay
// (whole seconds, rounded up), with the same Attempt on its next
// delivery. SQS delays a message by 15 minutes at most: a longer delay
// returns an error wrapping backend.ErrSnoozeLimit, and the bus nacks,
// which counts.
func (s standardSubscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	d := visibility(delay)
	if d > maxDelaySeconds*time.Second {
		return fmt.Errorf("sqs: snooze %q group %q: %w: a delay of %v is over SQS's 15 minutes a message", s.topic, s.cfg.Group, backend.ErrSnoozeLimit, delay)
	}
	return s.giveBackCopy(ctx, "snooze", id.(*ackID), d)
}

// giveBackCopy sends the queue a copy of the delivery a, delayed by d,
// that counts the attempts a counted, then deletes a. A crash between
// the two leaves both, never neither.
func (s standardSubscription) giveBackCopy(ctx context.Context, op string, a *ackID, d time.Duration) error {
	if !a.live(time.Now()) {
		return fmt.Errorf("sqs: %s %q group %q: %w", op, s.topic, s.cfg.Group, backend.ErrStale)
	}
	_, err := s.b.sqs.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(s.queueURL),
		MessageBody:  aws.String(a.body),
		DelaySeconds: seconds(d),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			attrEnvelope: {DataType: aws.String("String"), StringValue: aws.String(a.envelope)},
			attrCounted:  {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(a.attempt - 1))},
		},
	})
	if err != nil {
		return fmt.Errorf("sqs: %s %q group %q: send the copy: %w", op, s.topic, s.cfg.Group, classify(err))
	}
	if err := s.Ack(ctx, []backend.AckID{a}); err != nil {
		return fmt.Errorf("sqs: %s %q group %q: the copy is sent; deleting the delivery: %w", op, s.topic, s.cfg.Group, err)
	}
	return nil
}

// giveBackCopies sends the queue a copy of each message, counting the
// attempts counted before the receive that got it, and deletes the
// messages: the receive's caller had gone, so it counts no attempt.
func (s *subscription) giveBackCopies(ctx context.Context, msgs []sqstypes.Message) error {
	sends := make([]sqstypes.SendMessageBatchRequestEntry, 0, len(msgs))
	deletes := make([]sqstypes.DeleteMessageBatchRequestEntry, 0, len(msgs))
	for i, m := range msgs {
		received, _ := strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		counted := max(received-1, 0)
		if av, ok := m.MessageAttributes[attrCounted]; ok {
			c, _ := strconv.Atoi(aws.ToString(av.StringValue))
			counted += max(c, 0)
		}
		attrs := map[string]sqstypes.MessageAttributeValue{
			attrCounted: {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(counted))},
		}
		if av, ok := m.MessageAttributes[attrEnvelope]; ok {
			attrs[attrEnvelope] = av
		}
		sends = append(sends, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body, MessageAttributes: attrs})
		deletes = append(deletes, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	out, err := s.b.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: sends}, noRepeat)
	if err != nil {
		return fmt.Errorf("send the copies: %w", err)
	}
	sent := map[string]bool{}
	for _, ok := range out.Successful {
		sent[aws.ToString(ok.Id)] = true
	}
	kept := deletes[:0]
	for _, d := range deletes {
		if sent[aws.ToString(d.Id)] {
			kept = append(kept, d)
		}
	}
	if len(kept) > 0 {
		if _, err := s.b.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: kept}); err != nil {
			return fmt.Errorf("the copies are sent; deleting the messages: %w", err)
		}
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("%d copies not sent: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
	}
	return nil
}
