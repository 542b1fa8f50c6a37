package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
)

// scenarioOutbox is e2e through the transactional outbox: each batch is
// written by outbox.Publish as a transaction of its own (one statement,
// committed, as the raw loop's INSERT), a relay in the
// same process publishes the committed rows to the bus, and latency runs
// from the start of the transaction to the handler. Its baseline is the
// dual write the outbox replaces: an INSERT, then XADDs.
const scenarioOutbox = "outbox"

// outboxConfig is the outbox scenario's part of the command line.
type outboxConfig struct {
	DB string // PostgreSQL URL of the outbox
}

func (c *benchConfig) validateOutbox() []error {
	if c.Scenario != scenarioOutbox {
		if c.DB != "" {
			return []error{fmt.Errorf("--db: only the outbox scenario uses a database")}
		}
		return nil
	}
	var errs []error
	if c.DB == "" {
		errs = append(errs, errors.New("--scenario outbox: give the PostgreSQL URL with --db"))
	} else if _, err := pgx.ParseConfig(c.DB); err != nil {
		errs = append(errs, fmt.Errorf("--db: %w", err))
	}
	if u, err := url.Parse(c.URL); c.Baseline && (err != nil || u.Scheme != "redis" && u.Scheme != "rediss") {
		errs = append(errs, errors.New("--baseline: the outbox's raw loop (INSERT, then XADD) needs a redis:// URL"))
	}
	if c.Rate > 0 {
		errs = append(errs, errors.New("--rate: the outbox scenario is not paced"))
	}
	return errs
}

// busOpener is how a run opens its bus side.
func busOpener(cfg benchConfig) openTarget {
	if cfg.Scenario == scenarioOutbox {
		return openOutboxTarget
	}
	return openBusTarget
}

// rawOpener is how a run opens its raw side.
func rawOpener(cfg benchConfig) openTarget {
	if cfg.Scenario == scenarioOutbox {
		return openRawOutboxTarget
	}
	return openRawTarget
}

// pgConns are the connections of a run's publishers.
type pgConns struct {
	url   string
	mu    sync.Mutex
	conns []*pgx.Conn
}

func (p *pgConns) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil, fmt.Errorf("outbox database: %w", err)
	}
	p.mu.Lock()
	p.conns = append(p.conns, conn)
	p.mu.Unlock()
	return conn, nil
}

func (p *pgConns) close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, c := range p.conns {
		errs = append(errs, c.Close(ctx))
	}
	p.conns = nil
	return errors.Join(errs...)
}

// outboxTarget writes through the outbox and consumes through the bus.
type outboxTarget struct {
	*busTarget
	pg    pgConns
	relay *outbox.Relay
}

func openOutboxTarget(ctx context.Context, r *benchRun) (target, error) {
	bt, err := openBusTarget(ctx, r)
	if err != nil {
		return nil, err
	}
	t := &outboxTarget{busTarget: bt.(*busTarget), pg: pgConns{url: r.cfg.DB}}
	conn, err := t.pg.connect(ctx)
	if err == nil {
		err = outbox.Migrate(ctx, conn)
	}
	if err == nil {
		t.relay, err = outbox.NewRelay(r.cfg.DB, t.b, outbox.WithObserver(observer.Func(r.observe)))
	}
	if err != nil {
		return nil, errors.Join(err, t.pg.close(ctx), t.busTarget.close(ctx))
	}
	return t, nil
}

func (t *outboxTarget) client() string { return "bus+outbox" }

func (t *outboxTarget) publisher(ctx context.Context) (publisher, error) {
	conn, err := t.pg.connect(ctx)
	if err != nil {
		return nil, err
	}
	p := &outboxPublisher{conn: conn, topic: t.r.topic, msgs: make([]bus.Message, t.r.cfg.Batch), ptrs: make([]*bus.Message, t.r.cfg.Batch)}
	for i := range p.msgs {
		p.ptrs[i] = &p.msgs[i]
	}
	return p, nil
}

func (t *outboxTarget) close(ctx context.Context) error {
	return errors.Join(t.relay.Close(ctx), t.pg.close(ctx), t.busTarget.close(ctx))
}

// outboxPublisher commits each batch through the outbox, as a transaction
// of its own.
type outboxPublisher struct {
	conn  *pgx.Conn
	topic string
	msgs  []bus.Message
	ptrs  []*bus.Message
}

func (p *outboxPublisher) publish(ctx context.Context, payloads [][]byte) error {
	for i, pl := range payloads {
		p.msgs[i] = bus.Message{Payload: pl}
	}
	// One statement outside BEGIN is a transaction of its own, as the raw
	// loop's INSERT is: both sides commit once per batch.
	return outbox.Publish(ctx, p.conn, p.topic, p.ptrs[:len(payloads)]...)
}

// rawOutboxTarget is the dual write: go-redis as the Redis baseline, with
// an INSERT of the batch before its XADDs.
type rawOutboxTarget struct {
	*redisTarget
	pg pgConns
}

func openRawOutboxTarget(ctx context.Context, r *benchRun) (target, error) {
	rt, err := openRedisTarget(ctx, r)
	if err != nil {
		return nil, err
	}
	t := &rawOutboxTarget{redisTarget: rt.(*redisTarget), pg: pgConns{url: r.cfg.DB}}
	conn, err := t.pg.connect(ctx)
	if err == nil {
		_, err = conn.Exec(ctx, rawclient.PGRedisSchema)
	}
	if err != nil {
		return nil, errors.Join(err, t.pg.close(ctx), t.redisTarget.close(ctx))
	}
	return t, nil
}

func (t *rawOutboxTarget) client() string { return "pgx+go-redis" }

func (t *rawOutboxTarget) publisher(ctx context.Context) (publisher, error) {
	conn, err := t.pg.connect(ctx)
	if err != nil {
		return nil, err
	}
	rp := rawclient.NewRedisPublisher(t.rc, t.key, t.r.cfg.Batch)
	return rawOutboxPublisher{rawclient.NewPGRedisPublisher(conn, rp, t.r.cfg.Batch)}, nil
}

type rawOutboxPublisher struct{ p *rawclient.PGRedisPublisher }

func (p rawOutboxPublisher) publish(ctx context.Context, payloads [][]byte) error {
	return p.p.Publish(ctx, payloads)
}

// close empties the raw table, then closes the connections and the client.
func (t *rawOutboxTarget) close(ctx context.Context) error {
	var err error
	if len(t.pg.conns) > 0 {
		_, err = t.pg.conns[0].Exec(ctx, "TRUNCATE "+rawclient.PGRedisTable)
	}
	return errors.Join(err, t.pg.close(ctx), t.redisTarget.close(ctx))
}
