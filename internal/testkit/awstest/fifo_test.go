package awstest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

// TestFIFOGroupComesBackInOrder: messages of one message group received
// together come back from the group's first when they are made visible
// again together (one ChangeMessageVisibilityBatch to 0, as a member
// that leaves gives back what it held) and when their visibility
// timeout ends together (as when a member stops without giving them
// back), as AWS hands out a group's messages.
func TestFIFOGroupComesBackInOrder(t *testing.T) {
	s := awstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.SQS(t)
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("order.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	const perRound = 4
	for round := range 6 {
		for i := range perRound {
			body := strconv.Itoa(round*perRound + i)
			_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body),
				MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(body)})
			require.NoError(t, err)
		}
		expire := round%2 == 1
		lease := int32(30)
		if expire {
			lease = 1
		}
		got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: lease})
		require.NoError(t, err)
		require.Len(t, got.Messages, perRound, "round %d: the group's messages in one receive", round)
		if !expire {
			entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, 0, perRound)
			for i, m := range got.Messages {
				entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			_, err = c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl, Entries: entries})
			require.NoError(t, err)
		}
		again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 30, WaitTimeSeconds: 5})
		require.NoError(t, err)
		var bodies []string
		for _, m := range again.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
		}
		require.NotEmpty(t, bodies, "round %d (expired %v): the messages come back", round, expire)
		require.Equal(t, strconv.Itoa(round*perRound), bodies[0], "round %d (expired %v): the group's first message comes back first (got %v)", round, expire, bodies)
		require.Len(t, bodies, perRound, "round %d (expired %v): all the group's messages come back in one receive", round, expire)
		del := make([]sqstypes.DeleteMessageBatchRequestEntry, 0, len(again.Messages))
		for i, m := range again.Messages {
			del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		_, err = c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: del})
		require.NoError(t, err)
	}
}

// TestFIFOReceiveRepeatedWithItsAttemptID: a receive repeated with the
// ReceiveRequestAttemptId of an earlier one (as a client repeats one
// whose answer it lost) gets that receive's messages again, with the
// same receipt handles and its lease started anew; a receive with
// another ID does not get them while they are in flight; once one of
// them is deleted, the ID gets what a new receive would.
func TestFIFOReceiveRepeatedWithItsAttemptID(t *testing.T) {
	s := awstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.SQS(t)
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("attempt.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	for i := range 4 {
		body := strconv.Itoa(i)
		group := "g" + strconv.Itoa(i%2)
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(body)})
		require.NoError(t, err)
	}
	receive := func(attempt string, n int32) []sqstypes.Message {
		t.Helper()
		got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: n, VisibilityTimeout: 30,
			ReceiveRequestAttemptId:     aws.String(attempt),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
		require.NoError(t, err)
		return got.Messages
	}
	seen := func(ms []sqstypes.Message) (bodies, handles []string) {
		for _, m := range ms {
			bodies = append(bodies, aws.ToString(m.Body))
			handles = append(handles, aws.ToString(m.ReceiptHandle))
		}
		return bodies, handles
	}
	first := receive("a", 2)
	require.Len(t, first, 2, "the first receive")
	firstBodies, firstHandles := seen(first)
	again := receive("a", 2)
	bodies, handles := seen(again)
	require.Equal(t, firstBodies, bodies, "the repeated receive gets the same messages")
	require.Equal(t, firstHandles, handles, "with the same receipt handles")
	for _, m := range again {
		require.Equal(t, "1", m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)], "a repeat counts no receive")
	}
	other := receive("b", 10)
	otherBodies, _ := seen(other)
	for _, b := range otherBodies {
		require.NotContains(t, firstBodies, b, "another attempt ID does not get the messages in flight")
	}
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: first[0].ReceiptHandle})
	require.NoError(t, err)
	after := receive("a", 10)
	afterBodies, _ := seen(after)
	require.NotContains(t, afterBodies, firstBodies[0], "a deleted message is not handed out again")
	require.NotContains(t, afterBodies, firstBodies[1], "once one of them changed, the ID receives anew: the other is still in flight")
}
