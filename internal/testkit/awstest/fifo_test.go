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
