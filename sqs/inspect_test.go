package sqs

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/observer"
)

func TestTagValueRoundTrip(t *testing.T) {
	for _, name := range []string{"orders", "orders.v1~3", "a:b_c-d", "@x~y z", strings.Repeat("t", backend.MaxTopicLen) + "~127"} {
		v, ok := tagValue(name)
		require.True(t, ok, "%q fits a tag", name)
		assert.Regexp(t, `^[A-Za-z0-9_.:/=+\-@]*$`, v, "only characters SNS and SQS take in a tag value")
		back, ok := fromTagValue(v)
		require.True(t, ok)
		assert.Equal(t, name, back)
	}
	for _, bad := range []string{"@", "@4", "@zz"} {
		_, ok := fromTagValue(bad)
		assert.False(t, ok, "%q was not made by tagValue", bad)
	}
}

// TestInspect runs the Inspector against one moto server, on standard
// and on FIFO topics.
func TestInspect(t *testing.T) {
	srv := awstest.Start(t)
	for _, fifo := range []bool{false, true} {
		name := "Standard"
		if fifo {
			name = "FIFO"
		}
		t.Run(name, func(t *testing.T) {
			prefix := "insp" + strings.ToLower(name[:1]) + "-"
			b := openInspect(t, srv, prefix, fifo)
			t.Run("TopicsAndGroups", func(t *testing.T) { testInspectTopicsAndGroups(t, b) })
			t.Run("UntaggedTopics", func(t *testing.T) { testInspectUntagged(t, b) })
			t.Run("UnknownTopic", func(t *testing.T) { testInspectUnknownTopic(t, b) })
			t.Run("TaggingFailureIsHarmless", func(t *testing.T) { testInspectTaggingFailure(t, b) })
		})
	}
	t.Run("BusDeadLettersUnsupported", func(t *testing.T) {
		b := bus.New(openInspect(t, srv, "inspd-", false))
		defer func() { require.NoError(t, b.Close(context.Background())) }()
		ctx := inspectCtx(t)
		require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Payload: []byte("x")}))
		_, err := b.DeadLetters(ctx, "orders", 0)
		require.ErrorIs(t, err, bus.ErrUnsupported)
		_, err = b.ReplayDeadLetters(ctx, "orders", "x")
		require.ErrorIs(t, err, bus.ErrUnsupported)
		_, err = b.PurgeDeadLetters(ctx, "orders")
		require.ErrorIs(t, err, bus.ErrUnsupported)
		ts, err := b.Topics(ctx)
		require.NoError(t, err)
		require.Len(t, ts, 1)
		assert.Equal(t, "orders", ts[0].Name)
		assert.False(t, ts[0].DeadLetters, "no topic is marked as holding dead letters")
	})
	t.Run("PeekAndDeleteUnsupported", func(t *testing.T) {
		b := openInspect(t, srv, "inspp-", false)
		ctx := context.Background()
		_, _, err := b.Peek(ctx, "orders", "", 10)
		require.ErrorIs(t, err, backend.ErrUnsupported)
		assert.Contains(t, err.Error(), "SQS reads a message only by receiving it")
		_, err = b.Delete(ctx, "orders", []string{"x"})
		require.ErrorIs(t, err, backend.ErrUnsupported)
		assert.Contains(t, err.Error(), "counts a receive")
	})
}

func openInspect(t *testing.T, srv *awstest.Server, prefix string, fifo bool) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, &Options{Region: awstest.Region, Endpoint: srv.Endpoint(), Prefix: prefix, FIFO: fifo, CloseTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func inspectCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func subscribeSPI(t *testing.T, b *Backend, topic, group string) backend.Subscription {
	t.Helper()
	sub, err := b.Subscribe(inspectCtx(t), topic, backend.SubscribeConfig{Group: group, AckTimeout: 5 * time.Minute,
		MaxInFlight: 10, MaxDeliveries: 5, Observer: observer.Nop()})
	require.NoError(t, err, "subscribe %q to %q", group, topic)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func publishSPI(t *testing.T, b *Backend, topic string, n int) {
	t.Helper()
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: topic + "-" + string(rune('a'+i)), Payload: []byte("p")}
	}
	require.NoError(t, b.Publish(inspectCtx(t), topic, msgs))
}

func topicNames(t *testing.T, b *Backend) []string {
	t.Helper()
	ts, err := b.Topics(inspectCtx(t))
	require.NoError(t, err)
	var names []string
	for _, ti := range ts {
		assert.False(t, ti.Messages.Known() || ti.Bytes.Known() || ti.Published.Known() || ti.Scheduled.Known(),
			"%s: SNS counts nothing a request can read: every figure unknown, never 0 (%+v)", ti.Name, ti)
		names = append(names, ti.Name)
	}
	return names
}

// testInspectTopicsAndGroups: topics and groups are listed under their
// bus names, hashed AWS names included; a group's figures are its
// queue's: 5 published, 2 received and unsettled, 1 delayed copy.
func testInspectTopicsAndGroups(t *testing.T, b *Backend) {
	long := strings.Repeat("l", 150) + ".topic"
	topics := []string{"orders", "orders.v1~3", long}
	for _, tp := range topics {
		subscribeSPI(t, b, tp, "billing")
	}
	odd := strings.Repeat("g", 120) + ".audit:eu"
	sub := subscribeSPI(t, b, "orders", odd)
	assert.NotEqual(t, b.opts.Prefix+"orders--"+odd, queueName(b.opts.Prefix, "orders", odd, b.opts.FIFO), "the group's queue name is hashed")
	assert.NotEqual(t, b.opts.Prefix+long, topicName(b.opts.Prefix, long, b.opts.FIFO), "the long topic's name is hashed")

	// Subscribed to the topic besides its groups: a queue that is not
	// the bus's and the queue of another topic's group, not listed; an
	// untagged queue (an earlier build's) under the backend's unhashed
	// name for a group of the topic, listed.
	ctx := inspectCtx(t)
	arn, err := b.topicARN(ctx, "orders")
	require.NoError(t, err)
	// The setup requests are made again when they fail in transport, as
	// the backend's own setup requests are (idempotent).
	subscribeQueue := func(name string, create bool) {
		t.Helper()
		var qURL *string
		if create {
			attrs := map[string]string{}
			if b.opts.FIFO {
				attrs["FifoQueue"] = "true"
			}
			var q *sqs.CreateQueueOutput
			require.NoError(t, idempotent(ctx, func() (err error) {
				q, err = b.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
				return err
			}))
			qURL = q.QueueUrl
		} else {
			var q *sqs.GetQueueUrlOutput
			require.NoError(t, idempotent(ctx, func() (err error) {
				q, err = b.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
				return err
			}))
			qURL = q.QueueUrl
		}
		var qa *sqs.GetQueueAttributesOutput
		require.NoError(t, idempotent(ctx, func() (err error) {
			qa, err = b.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: qURL, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
			return err
		}))
		require.NoError(t, idempotent(ctx, func() error {
			_, err := b.sns.Subscribe(ctx, &sns.SubscribeInput{TopicArn: aws.String(arn), Protocol: aws.String("sqs"), Endpoint: aws.String(qa.Attributes["QueueArn"]),
				Attributes: map[string]string{"RawMessageDelivery": "true"}})
			return err
		}))
	}
	foreign := "foreign-queue"
	if b.opts.FIFO {
		foreign += fifoSuffix
	}
	subscribeQueue(foreign, true)
	subscribeQueue(queueName(b.opts.Prefix, "orders.v1~3", "billing", b.opts.FIFO), false)
	subscribeQueue(queueName(b.opts.Prefix, "orders", "legacy", b.opts.FIFO), true)

	names := topicNames(t, b)
	assert.Equal(t, []string{long, "orders", "orders.v1~3"}, filter(names, topics), "every topic under its bus name, sorted")

	publishSPI(t, b, "orders", 5)
	var got []*backend.Message
	require.Eventually(t, func() bool {
		ms, err := sub.Receive(ctx, 2-len(got))
		require.NoError(t, err)
		got = append(got, ms...)
		return len(got) == 2
	}, 20*time.Second, 10*time.Millisecond, "receive two messages and leave them unsettled")
	if !b.opts.FIFO {
		// A delayed copy, as a release sends: counted in Lag.
		qu, err := b.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queueName(b.opts.Prefix, "orders", odd, false))})
		require.NoError(t, err)
		_, err = b.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: qu.QueueUrl, MessageBody: aws.String("x"), DelaySeconds: 900})
		require.NoError(t, err)
	}
	wantLag := backend.Figure(3)
	if !b.opts.FIFO {
		wantLag = 4
	}
	var gs []backend.GroupInfo
	require.Eventually(t, func() bool {
		gs, err = b.Groups(ctx, "orders")
		require.NoError(t, err)
		return len(gs) == 3 && gs[1].Pending == 2 && gs[1].Lag == wantLag && gs[0].Lag == 5 && gs[2].Lag == 5
	}, 20*time.Second, 50*time.Millisecond, "the three groups with their figures: %+v", &gs)
	assert.Equal(t, "billing", gs[0].Name)
	assert.Equal(t, backend.Figure(0), gs[0].Pending)
	assert.Equal(t, odd, gs[1].Name, "the hashed queue under its group's name")
	assert.Equal(t, "legacy", gs[2].Name, "the untagged queue under its unhashed name")
	for _, g := range gs {
		assert.False(t, g.Consumers.Known(), "SQS does not know who receives: consumers unknown")
	}

	gs, err = b.Groups(ctx, "orders.v1~3")
	require.NoError(t, err)
	require.Len(t, gs, 1, "only the topic's own groups")
	assert.Equal(t, "billing", gs[0].Name)
	assert.Equal(t, backend.Figure(5), gs[0].Lag, "the messages of orders its queue was subscribed to above")
	gs, err = b.Groups(ctx, long)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	assert.Equal(t, "billing", gs[0].Name)
}

// filter keeps the names of want, in their order in names.
func filter(names, want []string) []string {
	var out []string
	for _, n := range names {
		for _, w := range want {
			if n == w {
				out = append(out, n)
			}
		}
	}
	return out
}

// testInspectUntagged: a topic made without the tag (by an older build)
// is listed under its AWS name when that is the name the backend gives
// it, and skipped when its AWS name was hashed, until the backend uses
// it, which tags it.
func testInspectUntagged(t *testing.T, b *Backend) {
	ctx := inspectCtx(t)
	create := func(name string) {
		in := &sns.CreateTopicInput{Name: aws.String(name)}
		if b.opts.FIFO {
			in.Attributes = map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "false"}
		}
		require.NoError(t, idempotent(ctx, func() error {
			_, err := b.sns.CreateTopic(ctx, in)
			return err
		}))
	}
	create(topicName(b.opts.Prefix, "legacy", b.opts.FIFO))
	create(topicName(b.opts.Prefix, "legacy.hashed", b.opts.FIFO))
	other := "other-app-topic"
	if b.opts.FIFO {
		other += fifoSuffix
	}
	create(other) // no prefix: not the backend's
	names := topicNames(t, b)
	assert.Contains(t, names, "legacy", "an untagged topic whose AWS name is the backend's name for it")
	assert.NotContains(t, names, "legacy.hashed", "an untagged topic whose AWS name was hashed cannot be mapped back")
	assert.NotContains(t, names, other)

	publishSPI(t, b, "legacy.hashed", 1)
	assert.Contains(t, topicNames(t, b), "legacy.hashed", "the backend tags a topic it uses")
}

// testInspectUnknownTopic: a topic that does not exist has no groups,
// and inspecting it does not create it.
func testInspectUnknownTopic(t *testing.T, b *Backend) {
	ctx := inspectCtx(t)
	gs, err := b.Groups(ctx, "never-published")
	require.NoError(t, err)
	assert.NotNil(t, gs)
	assert.Empty(t, gs)
	assert.NotContains(t, topicNames(t, b), "never-published", "Groups created no topic")

	// A topic deleted behind the backend's back, whose ARN it knows.
	subscribeSPI(t, b, "gone", "g")
	arn, err := b.topicARN(ctx, "gone")
	require.NoError(t, err)
	_, err = b.sns.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: aws.String(arn)})
	require.NoError(t, err)
	gs, err = b.Groups(ctx, "gone")
	require.NoError(t, err)
	assert.Empty(t, gs, "a deleted topic has no groups")
	_, err = b.Groups(ctx, "bad topic")
	require.ErrorIs(t, err, backend.ErrInvalidTopic, "refused before any request")
}

// testInspectTaggingFailure: a topic the backend cannot tag (here one
// with AWS's 50 tags already) is published to as any other, and listed
// as an untagged topic.
func testInspectTaggingFailure(t *testing.T, b *Backend) {
	ctx := inspectCtx(t)
	in := &sns.CreateTopicInput{Name: aws.String(topicName(b.opts.Prefix, "crowded", b.opts.FIFO))}
	if b.opts.FIFO {
		in.Attributes = map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "false"}
	}
	for i := range 50 {
		in.Tags = append(in.Tags, snstypes.Tag{Key: aws.String("k" + strconv.Itoa(i)), Value: aws.String("v")})
	}
	out, err := b.sns.CreateTopic(ctx, in)
	require.NoError(t, err)
	_, err = b.sns.TagResource(ctx, &sns.TagResourceInput{ResourceArn: out.TopicArn,
		Tags: []snstypes.Tag{{Key: aws.String(tagTopic), Value: aws.String("crowded")}}})
	require.Error(t, err, "the topic takes no more tags")

	sub := subscribeSPI(t, b, "crowded", "g")
	publishSPI(t, b, "crowded", 1)
	require.Eventually(t, func() bool {
		ms, err := sub.Receive(ctx, 1)
		require.NoError(t, err)
		return len(ms) == 1
	}, 20*time.Second, 10*time.Millisecond, "the message arrives")
	assert.Contains(t, topicNames(t, b), "crowded", "listed as an untagged topic")
}
