package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/urlopt"
	"github.com/eventbus-go/bus/redisstream"
)

// redisTarget is the baseline of redis:// and rediss://: go-redis on a
// stream key of its own. Each publisher sends its batch as one pipeline of
// XADDs, each entry with an id field (a unique message ID, as the bus
// stores one) and the payload; one reader, on a connection of the same pool, runs XREADGROUP with COUNT
// max-in-flight, handles the entries and acknowledges them with one XACK
// per read.
type redisTarget struct {
	r   *benchRun
	u   *url.URL
	be  *redisstream.Backend // opened from the URL only for its client
	rc  redis.UniversalClient
	key string
	// group is the raw reader's consumer group.
	group string
}

const (
	// redisRawBlock is the XREADGROUP block of the raw reader; it bounds
	// how long stopping the reader takes.
	redisRawBlock = 250 * time.Millisecond
)

// openRedisTarget takes go-redis as the bus would dial it: the URL goes
// through the Redis backend's own parser (address, credentials, database,
// TLS, cluster seeds, client parameters), and the raw side uses that
// backend's client and nothing else of it.
func openRedisTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	be, err := redisstream.OpenURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return &redisTarget{r: r, u: u, be: be, rc: be.Client(), key: rawName(fmt.Sprintf("bus-bench-raw:{%x}", r.nonce), r.topic), group: rawName("raw", r.group())}, nil
}

func (t *redisTarget) backend() string { return "redis" }

func (t *redisTarget) client() string { return "go-redis" }

func (t *redisTarget) prepare(ctx context.Context, scenario string) error {
	if scenario == scenarioPublish {
		return nil
	}
	if err := t.rc.XGroupCreateMkStream(ctx, t.key, t.group, "0").Err(); err != nil {
		return fmt.Errorf("baseline: create group: %w", urlopt.RedactError(err, t.u))
	}
	return nil
}

type redisPublisher struct {
	t *redisTarget
	p *rawclient.RedisPublisher
}

func (t *redisTarget) publisher(context.Context) (publisher, error) {
	if t.r.cfg.AsyncWindow > 0 {
		return redisPipelinePublisher{rawclient.NewRedisPipelinePublisher(t.rc, t.key, t.r.cfg.AsyncWindow)}, nil
	}
	return &redisPublisher{t: t, p: rawclient.NewRedisPublisher(t.rc, t.key, t.r.cfg.Batch)}, nil
}

func (p *redisPublisher) publish(ctx context.Context, payloads [][]byte) error {
	if err := p.p.Publish(ctx, payloads); err != nil {
		return urlopt.RedactError(err, p.t.u)
	}
	return nil
}

func (t *redisTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	return startLoopConsumer(func(ctx context.Context) error { return t.read(ctx, h) }), nil
}

// read is the raw reader loop; it returns when ctx ends or a read fails.
func (t *redisTarget) read(ctx context.Context, h func([]byte)) error {
	r := rawclient.RedisReader{Client: t.rc, Key: t.key, Group: t.group, Consumer: "c", Count: t.r.cfg.MaxInFlight, Block: redisRawBlock}
	if err := r.Run(ctx, h, nil); err != nil {
		return fmt.Errorf("baseline: %w", urlopt.RedactError(err, t.u))
	}
	return nil
}

// loopConsumer is a raw consumer whose read loop runs on a
// rawclient.Loop: the Redis, PostgreSQL, RabbitMQ and Kafka baselines.
type loopConsumer struct{ l *rawclient.Loop }

// startLoopConsumer starts run, which returns when its ctx ends or it
// fails.
func startLoopConsumer(run func(ctx context.Context) error) loopConsumer {
	return loopConsumer{rawclient.StartLoop(run)}
}

func (c loopConsumer) done() <-chan struct{} { return c.l.Ended() }

func (c loopConsumer) stop(ctx context.Context) error {
	if err := c.l.Stop(ctx); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}

func (c loopConsumer) err() error { return c.l.Err() }

// close deletes the stream key (and so its group) and closes the clients.
func (t *redisTarget) close(ctx context.Context) error {
	err := t.rc.Del(ctx, t.key).Err()
	if err != nil {
		err = fmt.Errorf("baseline: delete %s: %w", t.key, urlopt.RedactError(err, t.u))
	}
	return errors.Join(err, t.be.Close())
}
