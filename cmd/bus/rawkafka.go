package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/internal/rawclient"
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
	pub, err := rawclient.NewKafkaProducer(seeds)
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
	if err := rawclient.KafkaCreateTopic(ctx, t.pub, t.topic, t.parts); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}

type kafkaPublisher struct{ t *kafkaTarget }

func (t *kafkaTarget) publisher(context.Context) (publisher, error) { return kafkaPublisher{t}, nil }

func (p kafkaPublisher) publish(ctx context.Context, payloads [][]byte) error {
	if err := rawclient.KafkaPublish(ctx, p.t.pub, p.t.topic, payloads); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}

func (t *kafkaTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	cl, err := rawclient.NewKafkaMember(t.seeds, t.group, t.topic)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	t.member = cl
	return startLoopConsumer(func(ctx context.Context) error {
		return rawclient.KafkaConsume(ctx, cl, t.r.cfg.MaxInFlight, h)
	}), nil
}

// close deletes the topic (and so what the group read) and closes the
// clients.
func (t *kafkaTarget) close(ctx context.Context) error {
	if t.member != nil {
		t.member.Close()
	}
	err := rawclient.KafkaDelete(ctx, t.pub, t.topic, t.group)
	t.pub.Close()
	return err
}
