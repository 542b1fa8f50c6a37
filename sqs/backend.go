package sqs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/sdkhttp"
)

// Backend is the SNS+SQS backend. It is safe for concurrent use.
type Backend struct {
	opts      Options
	sqs       *sqs.Client
	sns       *sns.Client
	transport *http.Transport

	// ctx ends when the backend closes; every subscription's receive
	// derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	// bg counts the receive requests still running after their caller
	// returned; Close waits for them, within CloseTimeout.
	bg sync.WaitGroup

	mu     sync.Mutex
	closed bool
	topics map[string]string // bus topic -> SNS topic ARN
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend for o. It validates o and reads the AWS SDK's
// configuration (environment and shared files) but reaches no AWS
// endpoint: topics and queues are created by Publish and Subscribe.
func New(ctx context.Context, o *Options) (*Backend, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqs: open: %w", err)
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRegion(opts.Region),
		config.WithRetryer(newRetryer),
	}
	if opts.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(opts.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("sqs: open: load the AWS configuration: %w", err)
	}
	// The backend keeps its transport (the SDK's, with any CA bundle the
	// configuration names), so that Close can release its connections.
	transport := awshttp.NewBuildableClient().GetTransport()
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		transport = bc.GetTransport()
	}
	cfg.HTTPClient = sdkhttp.Client{HTTP: &http.Client{Transport: transport, Timeout: opts.RequestTimeout}}
	b := &Backend{
		opts:      opts,
		transport: transport,
		topics:    map[string]string{},
	}
	b.sqs = sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
	})
	b.sns = sns.NewFromConfig(cfg, func(o *sns.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
	})
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Capabilities reports what SNS+SQS guarantee: standard topics and
// queues, or with Options.FIFO, FIFO ones, which add per-key order
// (KeyOwnership: a message group is handed to one receive at a time) and
// publish deduplication.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:            "sqs",
		ConsumerGroups:  true,
		Persistent:      true,
		Redelivery:      true,
		NackDelay:       true,
		Extend:          true,
		PublishDedup:    b.opts.FIFO,
		KeyOwnership:    b.opts.FIFO,
		MaxPayload:      maxPayload,
		MaxPayloadLimit: "SNS's and SQS's 256 KiB message size, with room kept for the ID, key and headers and for a payload that travels in base64",
	}
}

// Close ends every subscription, cancels the requests still running and
// releases the backend's connections, within Options.CloseTimeout.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	done := make(chan struct{})
	go func() {
		b.bg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-time.After(b.opts.CloseTimeout):
		err = fmt.Errorf("sqs: close: requests still running after %v", b.opts.CloseTimeout)
	}
	b.transport.CloseIdleConnections()
	return err
}

// startBackground counts a request that may outlive its caller; it
// reports false once the backend is closed.
func (b *Backend) startBackground() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.bg.Add(1)
	return true
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// topicARN returns the ARN of topic's SNS topic, creating the topic the
// first time (CreateTopic is idempotent) and tagging it with the bus
// topic (TagResource, which CreateTopic's tags could not do on a topic
// that exists untagged: AWS refuses to create it again with other tags).
func (b *Backend) topicARN(ctx context.Context, topic string) (string, error) {
	b.mu.Lock()
	arn, ok := b.topics[topic]
	b.mu.Unlock()
	if ok {
		return arn, nil
	}
	var out *sns.CreateTopicOutput
	err := idempotent(ctx, func() (err error) {
		in := &sns.CreateTopicInput{Name: aws.String(topicName(b.opts.Prefix, topic, b.opts.FIFO))}
		if b.opts.FIFO {
			in.Attributes = map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "false"}
		}
		out, err = b.sns.CreateTopic(ctx, in)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create the SNS topic: %w", err)
	}
	arn = aws.ToString(out.TopicArn)
	b.tagTopicARN(ctx, arn, topic)
	b.mu.Lock()
	b.topics[topic] = arn
	b.mu.Unlock()
	return arn, nil
}

// Publish sends msgs through SNS PublishBatch, at most ten messages and
// 256 KiB a call. The calls of one Publish run concurrently; on FIFO
// topics the calls that carry one message group run one after another
// (see publishInOrder).
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.isClosed() {
		return fmt.Errorf("sqs: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	enc := make([]encoded, len(msgs))
	for i, m := range msgs {
		enc[i] = encode(m)
		if n := enc[i].size(); n > maxMessageBytes {
			return fmt.Errorf("sqs: publish %q: message %d: %w: %d bytes encoded, over SNS's 256 KiB", topic, i, backend.ErrInvalidMessage, n)
		}
	}
	arn, err := b.topicARN(ctx, topic)
	if err != nil {
		return fmt.Errorf("sqs: publish %q: %w", topic, err)
	}
	errs := make([]error, len(msgs))
	if b.opts.FIFO {
		b.publishInOrder(ctx, arn, msgs, enc, errs)
	} else {
		var wg sync.WaitGroup
		for _, r := range batches(enc) {
			wg.Go(func() { b.publishBatch(ctx, arn, enc, r, errs) })
		}
		wg.Wait()
	}
	var failed []backend.Failure
	for i, err := range errs {
		if err != nil {
			failed = append(failed, backend.Failure{Index: i, ID: msgs[i].ID, Err: err})
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(failed) == len(msgs):
		return fmt.Errorf("sqs: publish %q: %w", topic, failed[0].Err)
	default:
		return fmt.Errorf("sqs: publish %q: %w", topic, &backend.BatchError{Failed: failed})
	}
}

// publishInOrder publishes to a FIFO topic: the messages go into lanes
// by a hash of their message group, at most maxLanes, each lane's
// batches one after another in publish order and the lanes concurrently.
// A lane stops at its first failed batch and fails its messages after
// it unsent, so no later message of a group is stored ahead of an
// earlier one.
func (b *Backend) publishInOrder(ctx context.Context, arn string, msgs []*backend.Message, enc []encoded, errs []error) {
	n := min((len(enc)+maxBatchEntries-1)/maxBatchEntries, maxLanes)
	lanes := make([][]int, n)
	for i := range enc {
		enc[i].group, enc[i].dedup = fifoIDs(msgs[i])
		h := fnv.New32a()
		_, _ = h.Write([]byte(enc[i].group))
		l := int(h.Sum32() % uint32(n))
		lanes[l] = append(lanes[l], i)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		if len(lane) > 0 {
			wg.Go(func() { b.publishLane(ctx, arn, enc, lane, errs) })
		}
	}
	wg.Wait()
}

// maxLanes bounds the concurrent PublishBatch calls of one Publish to a
// FIFO topic.
const maxLanes = 8

// publishLane sends the messages enc[lane[0]], enc[lane[1]], ... in
// batches, one after another, and stops at the first batch that fails.
func (b *Backend) publishLane(ctx context.Context, arn string, enc []encoded, lane []int, errs []error) {
	part := make([]encoded, len(lane))
	for j, i := range lane {
		part[j] = enc[i]
	}
	perr := make([]error, len(lane))
	defer func() {
		for j, i := range lane {
			errs[i] = perr[j]
		}
	}()
	for _, r := range batches(part) {
		b.publishBatch(ctx, arn, part, r, perr)
		for j := r.from; j < r.to; j++ {
			if perr[j] == nil {
				continue
			}
			cause := fmt.Errorf("not sent: an earlier message of its message group failed: %w", perr[j])
			for k := r.to; k < len(part); k++ {
				perr[k] = cause
			}
			return
		}
	}
}

// span is the half-open range [from, to) of a batch's messages.
type span struct{ from, to int }

// batches splits enc into PublishBatch calls: at most ten entries and
// 256 KiB each.
func batches(enc []encoded) []span {
	var out []span
	from, size := 0, 0
	for i, e := range enc {
		n := e.size()
		if i > from && (i-from == maxBatchEntries || size+n > maxMessageBytes) {
			out = append(out, span{from, i})
			from, size = i, 0
		}
		size += n
	}
	return append(out, span{from, len(enc)})
}

// publishBatch sends enc[r.from:r.to] in one call and records each
// message's error in errs.
func (b *Backend) publishBatch(ctx context.Context, arn string, enc []encoded, r span, errs []error) {
	entries := make([]snstypes.PublishBatchRequestEntry, 0, r.to-r.from)
	for i := r.from; i < r.to; i++ {
		e := snstypes.PublishBatchRequestEntry{
			Id:      aws.String(strconv.Itoa(i)),
			Message: aws.String(enc[i].body),
			MessageAttributes: map[string]snstypes.MessageAttributeValue{
				attrEnvelope: {DataType: aws.String("String"), StringValue: aws.String(enc[i].envelope)},
			},
		}
		if enc[i].group != "" {
			e.MessageGroupId, e.MessageDeduplicationId = aws.String(enc[i].group), aws.String(enc[i].dedup)
		}
		entries = append(entries, e)
	}
	out, err := b.sns.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: entries}, noRepeatSNS)
	if err != nil {
		for i := r.from; i < r.to; i++ {
			errs[i] = err
		}
		return
	}
	for _, f := range out.Failed {
		i, convErr := strconv.Atoi(aws.ToString(f.Id))
		if convErr != nil || i < r.from || i >= r.to {
			continue
		}
		errs[i] = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
	}
	if len(out.Successful)+len(out.Failed) != r.to-r.from {
		err := errors.New("PublishBatch answered for fewer entries than it was sent")
		seen := map[string]bool{}
		for _, s := range out.Successful {
			seen[aws.ToString(s.Id)] = true
		}
		for i := r.from; i < r.to; i++ {
			if !seen[strconv.Itoa(i)] && errs[i] == nil {
				errs[i] = err
			}
		}
	}
}

// Subscribe creates (or joins) the SQS queue of cfg.Group on topic,
// subscribed to the topic's SNS topic with raw delivery and with the
// queue policy that lets SNS send to it. A new group receives what is
// published after its subscription exists.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("sqs: subscribe %q: %w", topic, backend.ErrClosed)
	}
	if cfg.StartFrom == backend.StartOldest {
		return nil, fmt.Errorf("sqs: subscribe %q: %w: a new SQS queue receives only what SNS publishes after it is subscribed", topic, backend.ErrUnsupported)
	}
	wrap := func(err error) error { return fmt.Errorf("sqs: subscribe %q group %q: %w", topic, cfg.Group, err) }
	topicArn, err := b.topicARN(ctx, topic)
	if err != nil {
		return nil, wrap(err)
	}
	var q *sqs.CreateQueueOutput
	err = idempotent(ctx, func() (err error) {
		attrs := map[string]string{
			string(sqstypes.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(maxRetention),
		}
		if b.opts.FIFO {
			attrs[string(sqstypes.QueueAttributeNameFifoQueue)] = "true"
			attrs[string(sqstypes.QueueAttributeNameContentBasedDeduplication)] = "false"
		}
		q, err = b.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName:  aws.String(queueName(b.opts.Prefix, topic, cfg.Group, b.opts.FIFO)),
			Attributes: attrs,
		})
		return err
	})
	if err != nil {
		return nil, wrap(fmt.Errorf("create the SQS queue: %w", err))
	}
	queueURL := aws.ToString(q.QueueUrl)
	b.tagQueue(ctx, queueURL, topic, cfg.Group)
	var attrs *sqs.GetQueueAttributesOutput
	err = idempotent(ctx, func() (err error) {
		attrs, err = b.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(queueURL),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
		})
		return err
	})
	if err != nil {
		return nil, wrap(fmt.Errorf("read the queue's ARN: %w", err))
	}
	queueArn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if err := idempotent(ctx, func() error {
		_, err := b.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
			QueueUrl:   aws.String(queueURL),
			Attributes: map[string]string{string(sqstypes.QueueAttributeNamePolicy): queuePolicy(queueArn, topicArn)},
		})
		return err
	}); err != nil {
		return nil, wrap(fmt.Errorf("set the queue policy: %w", err))
	}
	if err := idempotent(ctx, func() error {
		_, err := b.sns.Subscribe(ctx, &sns.SubscribeInput{
			TopicArn:   aws.String(topicArn),
			Protocol:   aws.String("sqs"),
			Endpoint:   aws.String(queueArn),
			Attributes: map[string]string{"RawMessageDelivery": "true"},
		})
		return err
	}); err != nil {
		return nil, wrap(fmt.Errorf("subscribe the queue to the topic: %w", err))
	}
	sub := newSubscription(b, topic, queueURL, cfg)
	if b.opts.FIFO {
		return sub, nil
	}
	return standardSubscription{sub}, nil
}

// maxRetention is SQS's longest message retention, 14 days in seconds.
const maxRetention = 14 * 24 * 3600

// queuePolicy lets the SNS topic topicArn send to the queue queueArn.
func queuePolicy(queueArn, topicArn string) string {
	return `{"Version":"2012-10-17","Statement":[{"Sid":"bus-sns","Effect":"Allow",` +
		`"Principal":{"Service":"sns.amazonaws.com"},"Action":"sqs:SendMessage",` +
		`"Resource":` + strconv.Quote(queueArn) + `,"Condition":{"ArnEquals":{"aws:SourceArn":` + strconv.Quote(topicArn) + `}}}]}`
}

// newRetryer returns the SDK's retryer for the backend's requests. The
// bus owns retries: a request that failed is not repeated, with one
// exception. When the connection closed under a request (net.ErrClosed)
// while its answer was being read, the request may have taken effect or
// not, and it is repeated once, at once. (The backend's HTTP client,
// sdkhttp.Client, removes the known cause, aws-sdk-go-v2 issue 2737; the
// repeat covers any other.) The requests repeated so are safe to repeat:
// creating and subscribing are idempotent, deleting and changing a
// visibility act on a receipt handle, and a receive whose answer was
// lost hands its messages out again after their visibility timeout (on
// a FIFO queue at once, by its receive request attempt ID). Publish is
// never repeated, as the backend contract says: a standard topic would
// deliver a repeated batch twice. Neither is a release's
// SendMessageBatch, whose copies would be handed out twice. Both turn
// the repeat off (noRepeat, noRepeatSNS).
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 2
		o.Retryables = []retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			return aws.BoolTernary(errors.Is(err, net.ErrClosed))
		})}
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		o.RateLimiter = ratelimit.None
	})
}

// noRepeat turns the repeat of newRetryer off for one SQS request.
func noRepeat(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }

// noRepeatSNS turns the repeat of newRetryer off for one SNS request.
func noRepeatSNS(o *sns.Options) { o.Retryer = aws.NopRetryer{} }

// setupAttempts bounds the tries of an idempotent setup call.
const setupAttempts = 3

// idempotent runs call, an idempotent setup request (creating a topic or
// a queue, setting its policy, subscribing), again when it failed in
// transport, with no answer from AWS, up to setupAttempts times within
// ctx. Publish and the calls that settle deliveries are repeated only as
// newRetryer says.
func idempotent(ctx context.Context, call func() error) error {
	var err error
	for range setupAttempts {
		err = call()
		var ae smithy.APIError
		if err == nil || ctx.Err() != nil || errors.As(err, &ae) {
			return err
		}
	}
	return err
}
