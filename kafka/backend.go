package kafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/eventbus-go/bus/backend"
)

// maxRecordBytes is the most a record may take: the producer's batch
// limit (kgo's default, 1,000,012 bytes, under the broker's default
// message.max.bytes) less room for the batch's framing.
const maxRecordBytes = 1_000_000

// Backend is the Kafka backend. It is safe for concurrent use.
type Backend struct {
	opts Options
	pub  *kgo.Client // the idempotent producer and admin requests
	adm  *kadm.Client

	mu     sync.Mutex
	topics map[string]int32 // Kafka topics known to exist: their partition counts
	subs   map[*Subscription]struct{}
	closed bool
}

var (
	_ backend.Backend           = (*Backend)(nil)
	_ backend.Pinger            = (*Backend)(nil)
	_ backend.NativePartitioner = (*Backend)(nil)
	_ backend.Releaser          = (*Subscription)(nil)
	_ backend.Snoozer           = (*Subscription)(nil)
	_ backend.Extender          = (*Subscription)(nil)
	_ backend.Idler             = (*Subscription)(nil)
)

// New returns a backend on the brokers of o.Seeds. It checks o and then
// reaches a broker (a metadata request) before it returns, bounded by ctx.
func New(ctx context.Context, o *Options) (*Backend, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	cl, err := kgo.NewClient(opts.clientOpts(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<16),
		kgo.ProducerBatchMaxBytes(maxRecordBytes+12),
		// Publish sets each record's partition (partitionOf).
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w: %v", backend.ErrInvalidOption, err)
	}
	b := &Backend{opts: opts, pub: cl, adm: kadm.NewClient(cl), topics: map[string]int32{}, subs: map[*Subscription]struct{}{}}
	if _, err := b.adm.BrokerMetadata(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: reach the brokers: %w", err)
	}
	return b, nil
}

// clientOpts are the options every client of the backend shares.
func (o Options) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	dialer := &net.Dialer{Timeout: o.DialTimeout}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Seeds...),
		kgo.ClientID(o.ClientID),
		kgo.DialTimeout(o.DialTimeout),
		kgo.RequestTimeoutOverhead(o.RequestTimeout),
		kgo.RetryTimeout(o.RequestTimeout),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
	switch {
	case o.TLS != nil:
		opts = append(opts, kgo.DialTLSConfig(o.TLS.Clone()))
	case o.Dial != nil:
		opts = append(opts, kgo.Dialer(o.Dial))
	default:
		opts = append(opts, kgo.Dialer(dialer.DialContext))
	}
	switch o.SASL {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: o.User, Pass: o.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: o.User, Pass: o.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: o.User, Pass: o.Password}.AsSha512Mechanism()))
	}
	return append(opts, extra...)
}

// Capabilities: see the package doc.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:            "kafka",
		ConsumerGroups:  true,
		Persistent:      true,
		Redelivery:      true,
		NackDelay:       true,
		Ordered:         true,
		StartOldest:     true,
		Extend:          true,
		KeyOwnership:    true,
		MaxPayload:      maxRecordBytes - backend.MaxHeaderBytes - 2*backend.MaxHeaderKeyLen - 4096,
		MaxPayloadLimit: "the producer's batch limit of 1000012 bytes (under the broker's message.max.bytes) less room for the key and headers",
	}
}

// kafkaTopic is the Kafka topic of a bus topic: the same name when Kafka
// allows it (letters, digits, '.', '_', '-', at most 249 bytes), else
// "bus.h." and the SHA-256 of the name.
func kafkaTopic(topic string) string {
	ok := len(topic) <= 249
	for i := 0; ok && i < len(topic); i++ {
		c := topic[i]
		ok = c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if ok && topic != "." && topic != ".." {
		return topic
	}
	sum := sha256.Sum256([]byte(topic))
	return "bus.h." + hex.EncodeToString(sum[:])
}

// ensureTopic creates the Kafka topic kt when this backend has not seen
// it: Options.Partitions partitions (the broker's default when 0), the
// broker's default replication. It returns kt's partition count.
func (b *Backend) ensureTopic(ctx context.Context, kt string) (int32, error) {
	parts := int32(-1)
	if b.opts.Partitions > 0 {
		parts = int32(b.opts.Partitions)
	}
	return b.createTopic(ctx, kt, parts)
}

// createTopic creates the Kafka topic kt with parts partitions (the
// broker's default when -1) unless it exists, waits until the brokers
// know it, and returns its partition count.
func (b *Backend) createTopic(ctx context.Context, kt string, parts int32) (int32, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, backend.ErrClosed
	}
	known := b.topics[kt]
	b.mu.Unlock()
	if known > 0 {
		return known, nil
	}
	resp, err := b.adm.CreateTopic(ctx, parts, -1, nil, kt)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %q: %w", kt, err)
	}
	n, err := b.waitTopic(ctx, kt)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.topics[kt] = n
	b.mu.Unlock()
	return n, nil
}

// waitTopic waits until the brokers' metadata shows kt with a leader for
// every partition: a topic just created is not known everywhere at once.
// It returns kt's partition count.
func (b *Backend) waitTopic(ctx context.Context, kt string) (int32, error) {
	wait := 10 * time.Millisecond
	for {
		td, err := b.adm.ListTopics(ctx, kt)
		if err == nil {
			t, ok := td[kt]
			ready := ok && t.Err == nil && len(t.Partitions) > 0
			for _, p := range t.Partitions {
				ready = ready && p.Leader >= 0 && p.Err == nil
			}
			if ready {
				return int32(len(t.Partitions)), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for topic %q: %w", kt, ctx.Err())
		case <-time.After(wait):
			wait = min(2*wait, 200*time.Millisecond)
		}
	}
}

// TopicPartitions returns the partition count of topic's Kafka topic;
// when the topic does not exist and n > 0 it creates it with n
// partitions (Kafka creates a topic once: of two callers, the second
// reads the first's count). With n == 0 it only reads, 0 when the topic
// does not exist.
func (b *Backend) TopicPartitions(ctx context.Context, topic string, n int) (int, error) {
	if n < 0 || n > backend.MaxPartitions {
		return 0, fmt.Errorf("kafka: partitions of %q: %w: %d, want 0 to %d", topic, backend.ErrInvalidOption, n, backend.MaxPartitions)
	}
	kt := kafkaTopic(topic)
	b.mu.Lock()
	closed, known := b.closed, b.topics[kt]
	b.mu.Unlock()
	switch {
	case closed:
		return 0, fmt.Errorf("kafka: partitions of %q: %w", topic, backend.ErrClosed)
	case known > 0:
		return int(known), nil
	case n > 0:
		got, err := b.createTopic(ctx, kt, int32(n))
		if err != nil {
			return 0, fmt.Errorf("kafka: partitions of %q: %w", topic, err)
		}
		return int(got), nil
	}
	td, err := b.adm.ListTopics(ctx, kt)
	if err != nil {
		return 0, fmt.Errorf("kafka: partitions of %q: %w", topic, err)
	}
	t, ok := td[kt]
	if !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return 0, nil
	}
	if t.Err != nil {
		return 0, fmt.Errorf("kafka: partitions of %q: %w", topic, t.Err)
	}
	return len(t.Partitions), nil
}

// Ping asks a broker for its API versions (kgo's Ping: the first
// broker that answers), bounded by ctx.
func (b *Backend) Ping(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: ping: %w", backend.ErrClosed)
	}
	if err := b.pub.Ping(ctx); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return fmt.Errorf("kafka: ping: %w (%v)", cerr, err)
		}
		return fmt.Errorf("kafka: ping: %w", err)
	}
	return nil
}

// Publish produces msgs to topic's Kafka topic with the idempotent
// producer, all at once, and returns when the brokers acknowledged every
// record (acks=all) or ctx ended.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: publish %q: %w", topic, backend.ErrClosed)
	}
	kt := kafkaTopic(topic)
	parts, err := b.ensureTopic(ctx, kt)
	if err != nil {
		return fmt.Errorf("kafka: publish %q: %w", topic, err)
	}
	// The records are built here (they copy what they keep of msgs,
	// which the caller may reuse once Publish returned) and produced by
	// a goroutine of the call's own: Produce may wait on the client's
	// produce lock, and Publish returns by ctx whatever it waits on.
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = encode(kt, m)
		recs[i].Partition = int32(partitionOf(recs[i], m.ID, int(parts)))
	}
	errs := make([]error, len(msgs))
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Add(len(recs))
		for i, r := range recs {
			b.pub.Produce(ctx, r, func(_ *kgo.Record, err error) {
				errs[i] = err
				wg.Done()
			})
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("kafka: publish %q: %w", topic, ctx.Err())
	}
	var be backend.BatchError
	for i, err := range errs {
		if err != nil {
			if errors.Is(err, kgo.ErrClientClosed) {
				err = fmt.Errorf("%w: %v", backend.ErrClosed, err)
			}
			be.Failed = append(be.Failed, backend.Failure{Index: i, ID: msgs[i].ID, Err: err})
		}
	}
	switch {
	case len(be.Failed) == len(msgs):
		return fmt.Errorf("kafka: publish %q: %w", topic, be.Failed[0].Err)
	case len(be.Failed) > 0:
		return &be
	}
	return nil
}

// Close closes every subscription still open and the producer, within
// about twice Options.CloseTimeout, also on a dead network.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { _ = s.Close() })
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.CloseTimeout)
	defer cancel()
	_ = b.pub.Flush(ctx)
	b.pub.Close()
	return nil
}

// keyPartitioner routes keyed records as Kafka's Java clients and
// franz-go's default partitioner do: murmur2 of the key, its sign bit
// masked, modulo the partition count. Its keyed path keeps no state.
var keyPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

// partitionOf is r's partition in a topic of n partitions: Kafka's own
// for a keyed record, so that a key published by the bus and by
// producers outside it lands in one partition, and
// backend.PartitionOf of the message ID for a record without a key.
func partitionOf(r *kgo.Record, id string, n int) int {
	if r.Key != nil {
		return keyPartitioner.Partition(r, n)
	}
	return backend.PartitionOf("", id, n)
}
