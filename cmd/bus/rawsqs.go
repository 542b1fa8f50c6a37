package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventbus-go/bus/internal/urlopt"
)

// sqsTarget is the baseline of sqs://: aws-sdk-go-v2 on an SNS topic and
// an SQS queue of its own, subscribed with raw message delivery, as the
// bus lays a topic and a group out. Each publisher sends its batch with
// PublishBatch, ten messages a call and the calls of one batch at once,
// each message with an ID attribute and its payload in base64 (the bench
// payloads are binary, which an SQS body cannot carry). One consumer, as
// the bus's one fetch loop, long polls with ReceiveMessage (up to ten
// messages, a one-second wait), hands each message to the handler and
// deletes what it received with one DeleteMessageBatch.
type sqsTarget struct {
	r        *benchRun
	u        *url.URL
	sns      *sns.Client
	sqs      *sqs.Client
	http     *http.Client
	topic    string
	queue    string
	topicArn string
	queueURL string
	seq      atomic.Uint64
}

// Figures of the raw SQS consumer, the bus backend's.
const (
	sqsRawBatch = 10 // messages a PublishBatch, a ReceiveMessage, a DeleteMessageBatch
	sqsRawWait  = 1  // seconds a ReceiveMessage waits
	sqsRawLease = 30 // seconds of visibility a ReceiveMessage asks for
)

// openSQSTarget loads the AWS SDK's default configuration for the URL's
// region and endpoint; it reaches no endpoint.
func openSQSTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(u.Hostname()))
	if err != nil {
		return nil, fmt.Errorf("baseline: load the AWS configuration: %w", err)
	}
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	cfg.HTTPClient = hc
	endpoint := u.Query().Get("endpoint")
	t := &sqsTarget{r: r, u: u, http: hc,
		topic: fmt.Sprintf("bus-bench-raw-%x", r.nonce), queue: fmt.Sprintf("bus-bench-raw-%x-q", r.nonce)}
	t.sns = sns.NewFromConfig(cfg, func(o *sns.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	t.sqs = sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return t, nil
}

func (t *sqsTarget) backend() string { return "sqs" }

func (t *sqsTarget) client() string { return "aws-sdk-go-v2" }

// prepare creates the topic and, but for the publish scenario, the queue
// with the policy that lets the topic send to it, subscribed to the
// topic with raw delivery: as on the bus, where the publish scenario has
// no group.
func (t *sqsTarget) prepare(ctx context.Context, scenario string) error {
	top, err := t.sns.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(t.topic)})
	if err != nil {
		return fmt.Errorf("baseline: create topic %s: %w", t.topic, err)
	}
	t.topicArn = aws.ToString(top.TopicArn)
	if scenario == scenarioPublish {
		return nil
	}
	q, err := t.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(t.queue)})
	if err != nil {
		return fmt.Errorf("baseline: create queue %s: %w", t.queue, err)
	}
	t.queueURL = aws.ToString(q.QueueUrl)
	attrs, err := t.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fmt.Errorf("baseline: read the ARN of %s: %w", t.queue, err)
	}
	queueArn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"sns.amazonaws.com"},` +
		`"Action":"sqs:SendMessage","Resource":` + strconv.Quote(queueArn) +
		`,"Condition":{"ArnEquals":{"aws:SourceArn":` + strconv.Quote(t.topicArn) + `}}}]}`
	if _, err := t.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   q.QueueUrl,
		Attributes: map[string]string{string(sqstypes.QueueAttributeNamePolicy): policy},
	}); err != nil {
		return fmt.Errorf("baseline: set the policy of %s: %w", t.queue, err)
	}
	if _, err := t.sns.Subscribe(ctx, &sns.SubscribeInput{
		TopicArn:   aws.String(t.topicArn),
		Protocol:   aws.String("sqs"),
		Endpoint:   aws.String(queueArn),
		Attributes: map[string]string{"RawMessageDelivery": "true"},
	}); err != nil {
		return fmt.Errorf("baseline: subscribe %s: %w", t.queue, err)
	}
	return nil
}

type sqsPublisher struct{ t *sqsTarget }

func (t *sqsTarget) publisher(context.Context) (publisher, error) { return sqsPublisher{t}, nil }

func (p sqsPublisher) publish(ctx context.Context, payloads [][]byte) error {
	errs := make([]error, (len(payloads)+sqsRawBatch-1)/sqsRawBatch)
	var wg sync.WaitGroup
	for b := range errs {
		chunk := payloads[b*sqsRawBatch : min((b+1)*sqsRawBatch, len(payloads))]
		wg.Go(func() { errs[b] = p.publishBatch(ctx, chunk) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p sqsPublisher) publishBatch(ctx context.Context, payloads [][]byte) error {
	entries := make([]snstypes.PublishBatchRequestEntry, len(payloads))
	for i, pl := range payloads {
		entries[i] = snstypes.PublishBatchRequestEntry{
			Id:      aws.String(strconv.Itoa(i)),
			Message: aws.String(base64.StdEncoding.EncodeToString(pl)),
			MessageAttributes: map[string]snstypes.MessageAttributeValue{
				"id": {DataType: aws.String("String"), StringValue: aws.String(strconv.FormatUint(p.t.seq.Add(1), 36))},
			},
		}
	}
	out, err := p.t.sns.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(p.t.topicArn), PublishBatchRequestEntries: entries})
	if err != nil {
		return fmt.Errorf("baseline: publish: %w", err)
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		return fmt.Errorf("baseline: publish: %d of %d messages refused: %s: %s", len(out.Failed), len(payloads), aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return nil
}

func (t *sqsTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	return startLoopConsumer(func(ctx context.Context) error { return t.receive(ctx, h) }), nil
}

// receive is the consumer's loop; it returns when ctx ends or a request
// fails.
func (t *sqsTarget) receive(ctx context.Context, h func([]byte)) error {
	buf := make([]byte, 0, t.r.cfg.Size)
	for ctx.Err() == nil {
		out, err := t.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:              aws.String(t.queueURL),
			MaxNumberOfMessages:   sqsRawBatch,
			WaitTimeSeconds:       sqsRawWait,
			VisibilityTimeout:     sqsRawLease,
			MessageAttributeNames: []string{"id"},
		})
		if err != nil {
			return fmt.Errorf("baseline: receive: %w", err)
		}
		if len(out.Messages) == 0 {
			continue
		}
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			body := aws.ToString(m.Body)
			buf = buf[:0]
			buf, err = base64.StdEncoding.AppendDecode(buf, []byte(body))
			if err != nil {
				return fmt.Errorf("baseline: a message body is not base64: %w", err)
			}
			h(buf)
			entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		del, err := t.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(t.queueURL), Entries: entries})
		if err != nil {
			return fmt.Errorf("baseline: delete: %w", err)
		}
		if len(del.Failed) > 0 {
			f := del.Failed[0]
			return fmt.Errorf("baseline: delete: %d of %d messages refused: %s: %s", len(del.Failed), len(entries), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return nil
}

// close deletes the queue and the topic (and with it the subscription)
// and closes the idle connections.
func (t *sqsTarget) close(ctx context.Context) error {
	var errs []error
	if t.queueURL != "" {
		if _, err := t.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(t.queueURL)}); err != nil {
			errs = append(errs, fmt.Errorf("baseline: delete queue %s: %w", t.queue, err))
		}
	}
	if t.topicArn != "" {
		if _, err := t.sns.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: aws.String(t.topicArn)}); err != nil {
			errs = append(errs, fmt.Errorf("baseline: delete topic %s: %w", t.topic, err))
		}
	}
	t.http.CloseIdleConnections()
	return errors.Join(errs...)
}
