package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/internal/urlopt"
)

// kafkaTarget is the baseline of kafka://: franz-go on a topic of its
// own, created with the partitions the URL asks for (the broker's default
// without), as the bus creates one. The producer is idempotent with
// acks=all and no linger, as the bus's; each publisher produces its batch
// at once, each record with an ID header, and waits for every
// acknowledgement. One group member polls up to max-in-flight records,
// handles them and commits their offsets once per poll.
type kafkaTarget struct {
	r      *benchRun
	u      *url.URL
	seeds  []string
	parts  int32
	pub    *kgo.Client
	topic  string
	group  string
	seq    atomic.Uint64
	member *kgo.Client
}

func openKafkaTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	parts := int32(-1)
	if s := u.Query().Get("partitions"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("baseline: partitions %q", s)
		}
		parts = int32(n)
	}
	seeds := strings.Split(u.Host, ",")
	pub, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<16), kgo.DialTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if _, err := kadm.NewClient(pub).BrokerMetadata(ctx); err != nil {
		pub.Close()
		return nil, fmt.Errorf("baseline: reach the brokers: %w", urlopt.RedactError(err, u))
	}
	return &kafkaTarget{r: r, u: u, seeds: seeds, parts: parts, pub: pub,
		topic: fmt.Sprintf("bus-bench-raw-%x", r.nonce), group: fmt.Sprintf("bus-bench-raw-%x-g", r.nonce)}, nil
}

func (t *kafkaTarget) backend() string { return "kafka" }

func (t *kafkaTarget) client() string { return "franz-go" }

// prepare creates the topic; a new group starts at its oldest record.
func (t *kafkaTarget) prepare(ctx context.Context, _ string) error {
	adm := kadm.NewClient(t.pub)
	resp, err := adm.CreateTopic(ctx, t.parts, -1, nil, t.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("baseline: create topic %s: %w", t.topic, err)
	}
	for {
		td, err := adm.ListTopics(ctx, t.topic)
		if err == nil && td.Has(t.topic) && td[t.topic].Err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("baseline: wait for topic %s: %w", t.topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type kafkaPublisher struct{ t *kafkaTarget }

func (t *kafkaTarget) publisher(context.Context) (publisher, error) { return kafkaPublisher{t}, nil }

func (p kafkaPublisher) publish(ctx context.Context, payloads [][]byte) error {
	var wg sync.WaitGroup
	errs := make([]error, len(payloads))
	wg.Add(len(payloads))
	for i, pl := range payloads {
		r := &kgo.Record{Topic: p.t.topic, Value: append([]byte(nil), pl...),
			Headers: []kgo.RecordHeader{{Key: "id", Value: strconv.AppendUint(nil, p.t.seq.Add(1), 36)}}}
		p.t.pub.Produce(ctx, r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("baseline: produce: %w", err)
	}
	return nil
}

func (t *kafkaTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...), kgo.ConsumerGroup(t.group), kgo.ConsumeTopics(t.topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	t.member = cl
	ctx, cancel := context.WithCancel(context.Background())
	c := &redisConsumer{cancel: cancel, exited: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(c.exited)
		for {
			fs := cl.PollRecords(ctx, max(t.r.cfg.MaxInFlight, 1))
			if ctx.Err() != nil {
				return
			}
			if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
				c.failed = fmt.Errorf("baseline: poll: %w", err)
				close(c.ended)
				return
			}
			fs.EachRecord(func(r *kgo.Record) { h(r.Value) })
			if err := cl.CommitRecords(ctx, fs.Records()...); err != nil && ctx.Err() == nil {
				c.failed = fmt.Errorf("baseline: commit: %w", err)
				close(c.ended)
				return
			}
		}
	}()
	return c, nil
}

// close deletes the topic (and so what the group read) and closes the
// clients.
func (t *kafkaTarget) close(ctx context.Context) error {
	if t.member != nil {
		t.member.Close()
	}
	adm := kadm.NewClient(t.pub)
	_, err := adm.DeleteTopics(ctx, t.topic)
	_, gerr := adm.DeleteGroups(ctx, t.group)
	t.pub.Close()
	return errors.Join(err, gerr)
}
