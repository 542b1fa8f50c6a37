package rawclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NewKafkaProducer returns the raw producer: idempotent (franz-go's
// default) with acks=all and no linger, as the bus's.
func NewKafkaProducer(seeds []string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<16), kgo.DialTimeout(10*time.Second))
}

// KafkaCreateTopic creates topic with partitions (-1: the broker's
// default) and waits until the broker lists it.
func KafkaCreateTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil && td.Has(topic) && td[topic].Err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for topic %s: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// KafkaDelete deletes topic and group.
func KafkaDelete(ctx context.Context, cl *kgo.Client, topic, group string) error {
	adm := kadm.NewClient(cl)
	_, err := adm.DeleteTopics(ctx, topic)
	_, gerr := adm.DeleteGroups(ctx, group)
	return errors.Join(err, gerr)
}

// KafkaPublish produces payloads to topic at once, each record with an
// ID header of its own, and waits for every acknowledgement.
func KafkaPublish(ctx context.Context, cl *kgo.Client, topic string, payloads [][]byte) error {
	var wg sync.WaitGroup
	errs := make([]error, len(payloads))
	wg.Add(len(payloads))
	for i, pl := range payloads {
		r := &kgo.Record{Topic: topic, Value: append([]byte(nil), pl...),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(nuid.Next())}}}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

// NewKafkaMember returns a member of group reading topic, a new group
// starting at the oldest record; it commits only through KafkaConsume.
func NewKafkaMember(seeds []string, group, topic string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
}

// KafkaConsume polls up to count records at a time with member, hands
// each value to h and commits the poll's offsets, until ctx ends (nil) or
// a poll or commit fails.
func KafkaConsume(ctx context.Context, member *kgo.Client, count int, h func([]byte)) error {
	for {
		fs := member.PollRecords(ctx, max(count, 1))
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("poll: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) { h(r.Value) })
		if err := member.CommitRecords(ctx, fs.Records()...); err != nil && ctx.Err() == nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
}
