package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"

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
}

const (
	redisRawGroup = "raw"
	// redisRawBlock is the XREADGROUP block of the raw reader; it bounds
	// how long stopping the reader takes.
	redisRawBlock = 250 * time.Millisecond
	redisRawField = "p"
	redisRawID    = "id"
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
	return &redisTarget{r: r, u: u, be: be, rc: be.Client(), key: fmt.Sprintf("bus-bench-raw:{%x}", r.nonce)}, nil
}

func (t *redisTarget) backend() string { return "redis" }

func (t *redisTarget) client() string { return "go-redis" }

func (t *redisTarget) prepare(ctx context.Context, scenario string) error {
	if scenario == scenarioPublish {
		return nil
	}
	if err := t.rc.XGroupCreateMkStream(ctx, t.key, redisRawGroup, "0").Err(); err != nil {
		return fmt.Errorf("baseline: create group: %w", urlopt.RedactError(err, t.u))
	}
	return nil
}

type redisPublisher struct {
	t    *redisTarget
	pipe redis.Pipeliner
	args []redis.XAddArgs
	vals [][]any
}

func (t *redisTarget) publisher(context.Context) (publisher, error) {
	n := t.r.cfg.Batch
	p := &redisPublisher{t: t, pipe: t.rc.Pipeline(), args: make([]redis.XAddArgs, n), vals: make([][]any, n)}
	for i := range p.vals {
		p.vals[i] = []any{redisRawID, nil, redisRawField, nil}
	}
	return p, nil
}

func (p *redisPublisher) publish(ctx context.Context, payloads [][]byte) error {
	for i, pl := range payloads {
		p.vals[i][1] = nuid.Next()
		p.vals[i][3] = pl
		p.args[i] = redis.XAddArgs{Stream: p.t.key, Values: p.vals[i]}
		p.pipe.XAdd(ctx, &p.args[i])
	}
	_, err := p.pipe.Exec(ctx)
	if err != nil {
		return urlopt.RedactError(err, p.t.u)
	}
	return nil
}

type redisConsumer struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when the reader returns
	ended  chan struct{} // closed when the reader failed
	failed error         // set before ended is closed
}

func (t *redisTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &redisConsumer{cancel: cancel, exited: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(c.exited)
		if err := t.read(ctx, h); err != nil && ctx.Err() == nil {
			c.failed = err
			close(c.ended)
		}
	}()
	return c, nil
}

// read is the raw reader loop; it returns when ctx ends or a read fails.
func (t *redisTarget) read(ctx context.Context, h func([]byte)) error {
	args := &redis.XReadGroupArgs{
		Group: redisRawGroup, Consumer: "c", Streams: []string{t.key, ">"},
		Count: int64(t.r.cfg.MaxInFlight), Block: redisRawBlock,
	}
	ids := make([]string, 0, t.r.cfg.MaxInFlight)
	for ctx.Err() == nil {
		res, err := t.rc.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("baseline: read: %w", urlopt.RedactError(err, t.u))
		}
		ids = ids[:0]
		for _, s := range res {
			for _, m := range s.Messages {
				v, _ := m.Values[redisRawField].(string)
				if id, _ := m.Values[redisRawID].(string); id == "" {
					return fmt.Errorf("baseline: entry %s has no %s field", m.ID, redisRawID)
				}
				h([]byte(v))
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		// The acks of a read are flushed even when the reader is being
		// stopped, as the bus flushes its acks on close.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = t.rc.XAck(actx, t.key, redisRawGroup, ids...).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("baseline: ack: %w", urlopt.RedactError(err, t.u))
		}
	}
	return nil
}

func (c *redisConsumer) done() <-chan struct{} { return c.ended }

func (c *redisConsumer) stop(ctx context.Context) error {
	c.cancel()
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("baseline: stop the reader: %w", ctx.Err())
	}
}

func (c *redisConsumer) err() error {
	select {
	case <-c.ended:
		return c.failed
	default:
		return nil
	}
}

// close deletes the stream key (and so its group) and closes the clients.
func (t *redisTarget) close(ctx context.Context) error {
	err := t.rc.Del(ctx, t.key).Err()
	if err != nil {
		err = fmt.Errorf("baseline: delete %s: %w", t.key, urlopt.RedactError(err, t.u))
	}
	return errors.Join(err, t.be.Close())
}
