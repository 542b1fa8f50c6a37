package sqs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// snsRead and sqsRead let the SDK retry an inspection's read-only
// request (a connection closed as the answer was read, say): the backend
// turns the SDK's retries off for every other request, since the bus
// owns those, but a read is safe to ask again.
func snsRead(o *sns.Options) { o.Retryer = retry.NewStandard() }
func sqsRead(o *sqs.Options) { o.Retryer = retry.NewStandard() }

// Tags that name the bus topic of an SNS topic and the bus topic and
// group of an SQS queue, so that inspection maps hashed AWS names back.
const (
	tagTopic = "bus-topic"
	tagGroup = "bus-group"
)

// maxTagValue is the longest tag value SNS and SQS take.
const maxTagValue = 256

// errNoPeek is the error of Peek and Delete.
var errNoPeek = fmt.Errorf("%w: SQS reads a message only by receiving it, which counts a receive and hides the message from the group for a visibility timeout", backend.ErrUnsupported)

// tagValue escapes name for a tag value: SNS and SQS take letters,
// digits, spaces and "_ . : / = + - @"; any other byte, and "@", is
// written "@" and two hex digits. ok is false when the result is longer
// than a tag value may be.
func tagValue(name string) (v string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == ':', c == '/', c == '=', c == '+', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "@%02X", c)
		}
	}
	return b.String(), b.Len() <= maxTagValue
}

// fromTagValue reverses tagValue; ok is false for a value it did not make.
func fromTagValue(v string) (name string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '@' {
			b.WriteByte(v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", false
		}
		n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), true
}

// tagTopicARN tags the SNS topic arn with its bus topic. It is best
// effort: a topic it could not tag (no sns:TagResource permission) works
// as any other and is inspected as an untagged topic (see Topics).
func (b *Backend) tagTopicARN(ctx context.Context, arn, topic string) {
	v, ok := tagValue(topic)
	if !ok {
		return
	}
	_ = idempotent(ctx, func() error {
		_, err := b.sns.TagResource(ctx, &sns.TagResourceInput{
			ResourceArn: aws.String(arn),
			Tags:        []snstypes.Tag{{Key: aws.String(tagTopic), Value: aws.String(v)}},
		})
		return err
	})
}

// tagQueue tags the SQS queue of a group with its bus topic and group,
// best effort as tagTopicARN.
func (b *Backend) tagQueue(ctx context.Context, queueURL, topic, group string) {
	tv, ok1 := tagValue(topic)
	gv, ok2 := tagValue(group)
	if !ok1 || !ok2 {
		return
	}
	_ = idempotent(ctx, func() error {
		_, err := b.sqs.TagQueue(ctx, &sqs.TagQueueInput{
			QueueUrl: aws.String(queueURL),
			Tags:     map[string]string{tagTopic: tv, tagGroup: gv},
		})
		return err
	})
}

// snsTopic is an SNS topic of the backend's kind (FIFO or standard)
// and prefix.
type snsTopic struct {
	arn, name string
}

// ownTopics lists the SNS topics whose names the backend could have
// made: its prefix, and ".fifo" exactly on FIFO backends.
func (b *Backend) ownTopics(ctx context.Context) ([]snsTopic, error) {
	var out []snsTopic
	p := sns.NewListTopicsPaginator(b.sns, &sns.ListTopicsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, snsRead)
		if err != nil {
			return nil, fmt.Errorf("list the SNS topics: %w", err)
		}
		for _, t := range page.Topics {
			arn := aws.ToString(t.TopicArn)
			name := arn[strings.LastIndexByte(arn, ':')+1:]
			if strings.HasSuffix(name, fifoSuffix) != b.opts.FIFO || !strings.HasPrefix(name, b.opts.Prefix) {
				continue
			}
			out = append(out, snsTopic{arn: arn, name: name})
		}
	}
	return out, nil
}

// untagged returns the bus name of an AWS name that carries no tag:
// the AWS name without the prefix (and ".fifo"), when the backend gives
// that bus name exactly this AWS name; ok is false for a name that was
// hashed, which cannot be mapped back.
func untagged(awsName, prefix string, fifo bool, name func(string) string) (string, bool) {
	bus := strings.TrimPrefix(awsName, prefix)
	if fifo {
		bus = strings.TrimSuffix(bus, fifoSuffix)
	}
	if bus == "" || backend.ValidateTopic(bus) != nil || name(bus) != awsName {
		return "", false
	}
	return bus, true
}

// inspectWorkers bounds the concurrent requests of one Topics or Groups.
const inspectWorkers = 8

// each runs f(i) for i in [0, n) on at most inspectWorkers goroutines and
// returns the first error.
func each(n int, f func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, inspectWorkers) {
		wg.Go(func() {
			for i := range next {
				errs[i] = f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// Topics implements backend.Inspector: the backend's SNS topics (FIFO
// topics on a FIFO backend, standard ones otherwise) under the names
// their bus-topic tags give. A topic without the tag is listed under its
// AWS name, without the prefix and ".fifo", when the backend gives that
// bus name exactly that AWS name, and skipped when the AWS name was
// hashed. An SNS topic stores nothing and SNS counts nothing a request
// can read: every figure is Unknown.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	ts, err := b.ownTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqs: topics: %w", err)
	}
	names := make([]string, len(ts))
	err = each(len(ts), func(i int) error {
		out, err := b.sns.ListTagsForResource(ctx, &sns.ListTagsForResourceInput{ResourceArn: aws.String(ts[i].arn)}, snsRead)
		if isNotFound(err) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("read the tags of SNS topic %q: %w", ts[i].name, err)
		}
		for _, tg := range out.Tags {
			if aws.ToString(tg.Key) == tagTopic {
				if n, ok := fromTagValue(aws.ToString(tg.Value)); ok {
					names[i] = n
				}
				return nil
			}
		}
		if n, ok := untagged(ts[i].name, b.opts.Prefix, b.opts.FIFO, func(n string) string { return topicName(b.opts.Prefix, n, b.opts.FIFO) }); ok {
			names[i] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: topics: %w", err)
	}
	out := []backend.TopicInfo{}
	for _, n := range names {
		if n == "" {
			continue
		}
		out = append(out, backend.TopicInfo{Name: n, Messages: backend.Unknown, Bytes: backend.Unknown,
			Published: backend.Unknown, Scheduled: backend.Unknown})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// findTopicARN returns the ARN of topic's SNS topic without creating
// it; "" when it does not exist.
func (b *Backend) findTopicARN(ctx context.Context, topic string) (string, error) {
	b.mu.Lock()
	arn, ok := b.topics[topic]
	b.mu.Unlock()
	if ok {
		return arn, nil
	}
	want := topicName(b.opts.Prefix, topic, b.opts.FIFO)
	ts, err := b.ownTopics(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range ts {
		if t.name == want {
			return t.arn, nil
		}
	}
	return "", nil
}

// Groups implements backend.Inspector: the SQS queues subscribed to the
// topic's SNS topic that belong to the bus, named by their bus-group tag
// (a queue whose tags name another topic is not listed; a queue without
// tags is listed when its name is the one the backend gives a group of
// the topic, unhashed). From the queue's attributes, Lag is
// ApproximateNumberOfMessages (visible) plus
// ApproximateNumberOfMessagesDelayed (a released or snoozed copy waiting
// for its DelaySeconds), Pending ApproximateNumberOfMessagesNotVisible
// (received, not deleted, their visibility timeout not ended).
// Consumers is Unknown: SQS does not know who receives. The figures are
// approximate: AWS computes them eventually consistently, and they may
// trail the queue by a minute or so.
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	if err := backend.ValidateTopic(topic); err != nil {
		if _, _, ok := backend.SplitPartitionTopic(topic); !ok {
			return nil, fmt.Errorf("sqs: groups: %w", err)
		}
	}
	wrap := func(err error) error { return fmt.Errorf("sqs: groups of %q: %w", topic, err) }
	arn, err := b.findTopicARN(ctx, topic)
	if err != nil {
		return nil, wrap(err)
	}
	if arn == "" {
		return []backend.GroupInfo{}, nil
	}
	var queues []string // queue ARNs
	seen := map[string]bool{}
	p := sns.NewListSubscriptionsByTopicPaginator(b.sns, &sns.ListSubscriptionsByTopicInput{TopicArn: aws.String(arn)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, snsRead)
		if isNotFound(err) {
			return []backend.GroupInfo{}, nil
		}
		if err != nil {
			return nil, wrap(fmt.Errorf("list the topic's subscriptions: %w", err))
		}
		for _, s := range page.Subscriptions {
			q := aws.ToString(s.Endpoint)
			if aws.ToString(s.Protocol) == "sqs" && !seen[q] {
				seen[q] = true
				queues = append(queues, q)
			}
		}
	}
	infos := make([]*backend.GroupInfo, len(queues))
	err = each(len(queues), func(i int) (err error) {
		infos[i], err = b.groupInfo(ctx, topic, queues[i])
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	out := []backend.GroupInfo{}
	for _, gi := range infos {
		if gi != nil {
			out = append(out, *gi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// groupInfo reads the queue queueArn subscribed to topic: nil when it is
// not a group of the topic or no longer exists.
func (b *Backend) groupInfo(ctx context.Context, topic, queueArn string) (*backend.GroupInfo, error) {
	// arn:aws:sqs:<region>:<account>:<name>
	parts := strings.Split(queueArn, ":")
	if len(parts) != 6 || parts[2] != "sqs" {
		return nil, nil
	}
	account, name := parts[4], parts[5]
	if strings.HasSuffix(name, fifoSuffix) != b.opts.FIFO {
		return nil, nil
	}
	u, err := b.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name), QueueOwnerAWSAccountId: aws.String(account)}, sqsRead)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find queue %q: %w", name, err)
	}
	queueURL := aws.ToString(u.QueueUrl)
	tags, err := b.sqs.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(queueURL)}, sqsRead)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the tags of queue %q: %w", name, err)
	}
	group := ""
	if gv, ok := tags.Tags[tagGroup]; ok {
		t, ok1 := fromTagValue(tags.Tags[tagTopic])
		g, ok2 := fromTagValue(gv)
		if !ok1 || !ok2 || t != topic {
			return nil, nil
		}
		group = g
	} else {
		pre := awsNamePrefix(b.opts.Prefix, topic)
		g, ok := untagged(name, pre, b.opts.FIFO, func(g string) string { return queueName(b.opts.Prefix, topic, g, b.opts.FIFO) })
		if !ok {
			return nil, nil
		}
		group = g
	}
	attrs, err := b.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	}, sqsRead)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the attributes of queue %q: %w", name, err)
	}
	count := func(a sqstypes.QueueAttributeName) backend.Figure {
		n, err := strconv.ParseInt(attrs.Attributes[string(a)], 10, 64)
		if err != nil || n < 0 {
			return backend.Unknown
		}
		return backend.Figure(n)
	}
	gi := &backend.GroupInfo{Name: group, Consumers: backend.Unknown,
		Pending: count(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Lag:     count(sqstypes.QueueAttributeNameApproximateNumberOfMessages),
	}
	if delayed := count(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed); !delayed.Known() {
		gi.Lag = backend.Unknown
	} else if gi.Lag.Known() {
		gi.Lag += delayed
	}
	return gi, nil
}

// awsNamePrefix is what the unhashed queue names of topic's groups
// start with.
func awsNamePrefix(prefix, topic string) string {
	return prefix + topic + "--"
}

// isNotFound reports whether err is AWS's answer that the topic (or its
// tags' resource) or the queue does not exist.
func isNotFound(err error) bool {
	var nf *snstypes.NotFoundException
	var rnf *snstypes.ResourceNotFoundException
	var qnf *sqstypes.QueueDoesNotExist
	if errors.As(err, &nf) || errors.As(err, &rnf) || errors.As(err, &qnf) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || ae.ErrorCode() == "NotFound")
}

// Peek implements backend.Inspector: it is unsupported (an error wrapping
// backend.ErrUnsupported), since SQS reads a message only by receiving
// it, which counts a receive and hides the message from the group.
func (b *Backend) Peek(context.Context, string, string, int) ([]*backend.Message, string, error) {
	return nil, "", fmt.Errorf("sqs: peek: %w", errNoPeek)
}

// Delete implements backend.Inspector: it is unsupported, as Peek is.
func (b *Backend) Delete(context.Context, string, []string) (int, error) {
	return 0, fmt.Errorf("sqs: delete: %w", errNoPeek)
}
