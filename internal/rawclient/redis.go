package rawclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"
)

// The fields of a raw Redis entry: a unique message ID, as the bus stores
// one, and the payload.
const (
	RedisIDField      = "id"
	RedisPayloadField = "p"
)

// RedisPublisher sends each batch as one pipeline of XADDs. Not safe for
// concurrent use: each publishing goroutine has its own.
type RedisPublisher struct {
	rc   redis.UniversalClient
	key  string
	pipe redis.Pipeliner
	args []redis.XAddArgs
	vals [][]any
}

// NewRedisPublisher returns a publisher of batches of up to batch entries
// to the stream key.
func NewRedisPublisher(rc redis.UniversalClient, key string, batch int) *RedisPublisher {
	p := &RedisPublisher{rc: rc, key: key, pipe: rc.Pipeline(), args: make([]redis.XAddArgs, batch), vals: make([][]any, batch)}
	for i := range p.vals {
		p.vals[i] = []any{RedisIDField, nil, RedisPayloadField, nil}
	}
	return p
}

// Publish adds payloads (at most the batch size) in one round trip.
func (p *RedisPublisher) Publish(ctx context.Context, payloads [][]byte) error {
	if len(payloads) > len(p.args) {
		return fmt.Errorf("rawclient: batch of %d, more than %d", len(payloads), len(p.args))
	}
	for i, pl := range payloads {
		p.vals[i][1] = nuid.Next()
		p.vals[i][3] = pl
		p.args[i] = redis.XAddArgs{Stream: p.key, Values: p.vals[i]}
		p.pipe.XAdd(ctx, &p.args[i])
	}
	_, err := p.pipe.Exec(ctx)
	return err
}

// RedisReader reads a stream as one member of a group: XREADGROUP with
// COUNT Count, the handler for each entry, then one XACK per read.
type RedisReader struct {
	Client   redis.UniversalClient // reads; may be a client of its own
	Acker    redis.UniversalClient // acks; Client when nil
	Key      string
	Group    string
	Consumer string
	Count    int
	Block    time.Duration
}

// Run reads until ctx ends (nil), a read or ack fails, or until reports
// true after a read was acked. The acks of a read are flushed even when
// ctx ended during it, as the bus flushes its acks on close.
func (r *RedisReader) Run(ctx context.Context, h func([]byte), until func() bool) error {
	args := &redis.XReadGroupArgs{Group: r.Group, Consumer: r.Consumer, Streams: []string{r.Key, ">"}, Count: int64(r.Count), Block: r.Block}
	acker := r.Acker
	if acker == nil {
		acker = r.Client
	}
	ids := make([]string, 0, r.Count)
	for ctx.Err() == nil {
		res, err := r.Client.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		ids = ids[:0]
		for _, s := range res {
			for _, m := range s.Messages {
				if id, _ := m.Values[RedisIDField].(string); id == "" {
					return fmt.Errorf("entry %s has no %s field", m.ID, RedisIDField)
				}
				v, _ := m.Values[RedisPayloadField].(string)
				h([]byte(v))
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = acker.XAck(actx, r.Key, r.Group, ids...).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		if until != nil && until() {
			return nil
		}
	}
	return nil
}
