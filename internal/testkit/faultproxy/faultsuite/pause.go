package faultsuite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
)

// Timings of the pause cases.
const (
	// pauseAckTimeout is the lease of the pause cases: far longer than
	// the wait for the last message (pauseDrainWithin), so a message
	// that waits for its lease to run out fails the case.
	pauseAckTimeout = 30 * time.Second
	// pauseDrainWithin bounds the wait for every message after the last
	// Publish.
	pauseDrainWithin = 10 * time.Second
	// The server is frozen once for each of pauseFor, pauseGap apart,
	// while messages are published: longer than an inline Redis read's
	// deadline (BLOCK + 200 ms), and once longer than a NATS pull's
	// (under a second plus 250 ms) and a blocking Redis read's grace
	// (1 s).
	pauseGap  = 300 * time.Millisecond
	pauseKeys = 64
	// pauseMessages are published at pauseRate a second, in batches of
	// pauseBatch.
	pauseMessages = 3000
	pauseRate     = 1000
	pauseBatch    = 10
	pauseLimit    = time.Minute
)

var pauseFor = []time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 1200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}

// RunPause runs the broker-pause cases as subtests of t: a key-ordered
// group (WithKeyOrdering, MaxInFlight 4, a 1 ms handler, a 30 s ack
// timeout) consumes 3,000 messages of 64 keys published at 1,000 a
// second, while the server is frozen (Harness.PauseServer) five times,
// for 400 ms and once for 1.2 s. A read whose reply the server sends after the client gave up on
// it must not let later messages overtake what it took. Each case asserts
// that no message is lost, handled out of its key's order, handled twice
// or counted as a redelivery, and that every message is handled within
// 10 s of the last Publish, far less than the ack timeout: nothing waits
// for a lease to run out. The cases: one member; two members; two
// members sharing four partitions; Harness.PauseCases picks some of them,
// and Harness.PauseMessages publishes fewer messages.
func RunPause(t *testing.T, h Harness) {
	require.NotEmpty(t, h.Target, "Harness.Target")
	require.NotNil(t, h.Open, "Harness.Open")
	require.NotNil(t, h.PauseServer, "Harness.PauseServer")
	require.NotNil(t, h.ResumeServer, "Harness.ResumeServer")
	cases := pauseCases
	if len(h.PauseCases) > 0 {
		cases = nil
		for _, name := range h.PauseCases {
			i := slices.IndexFunc(pauseCases, func(c pauseCase) bool { return c.name == name })
			require.GreaterOrEqual(t, i, 0, "Harness.PauseCases: no pause case %q", name)
			cases = append(cases, pauseCases[i])
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			watchdog(t, pauseLimit)
			p := &pauseRun{t: t, h: h, topic: "pause." + strings.ToLower(c.name), ledger: NewLedger(), last: map[string]int{}}
			p.run(c.members, c.partitions)
		})
	}
}

// RunPauseBounds checks that calls end with their ctx while the server
// is frozen (Harness.PauseServer), with no proxy: a member holds 8 of 50
// messages and acks them once the server is frozen, then Publish (200 ms
// ctx) fails within 300 ms, Subscribe (500 ms) returns within 600 ms, and
// Subscription.Close and Bus.Close with the acks pending (1 s ctx) return
// within 1.1 s. After Harness.ResumeServer a new member of the group gets
// every message.
func RunPauseBounds(t *testing.T, h Harness) {
	require.NotEmpty(t, h.Target, "Harness.Target")
	require.NotNil(t, h.Open, "Harness.Open")
	require.NotNil(t, h.PauseServer, "Harness.PauseServer")
	require.NotNil(t, h.ResumeServer, "Harness.ResumeServer")
	watchdog(t, caseLimit)
	e := &env{t: t, h: h, ledger: NewLedger(), topic: "pause.bounds"}
	e.createGroup()
	e.boundsEveryCall(e.busAt(h.Target), e.busAt(h.Target), e.busAt(h.Target), h.PauseServer, h.ResumeServer,
		func() *bus.Bus { return e.busAt(h.Target) })
}

// pauseCase is a group shape of RunPause.
type pauseCase struct {
	name                string
	members, partitions int
}

var pauseCases = []pauseCase{
	{"OneMember", 1, 1},
	{"TwoMembers", 2, 1},
	{"FourPartitions", 2, 4},
}

// pauseRun is one pause case.
type pauseRun struct {
	t      *testing.T
	h      Harness
	topic  string
	ledger *Ledger
	events events

	mu         sync.Mutex
	last       map[string]int // per key, the highest sequence number handled
	violations int
	firstBad   string
}

// handled records that seq of key was handled: one below the key's last
// is an order violation.
func (p *pauseRun) handled(key string, seq int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.last[key]
	if ok && seq < last {
		p.violations++
		if p.firstBad == "" {
			p.firstBad = fmt.Sprintf("%s: message %d after %d", key, seq, last)
		}
		return
	}
	p.last[key] = seq
}

func (p *pauseRun) open() *bus.Bus {
	b := bus.New(p.h.Open(p.t, p.h.Target), bus.WithObserver(&p.events))
	p.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

func (p *pauseRun) run(members, partitions int) {
	t := p.t
	pub := p.open()
	if partitions > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		require.NoError(t, pub.CreateTopic(ctx, p.topic, partitions), "create the topic with %d partitions", partitions)
		cancel()
	}
	var subs []*bus.Subscription
	for i := range members {
		consumer := "member-" + strconv.Itoa(i)
		member := p.open()
		sub, err := member.Subscribe(context.Background(), p.topic, func(ctx context.Context, d *bus.Delivery) error {
			p.ledger.Deliver(consumer, d.ID, d.Attempt)
			seq, err := strconv.Atoi(strings.TrimPrefix(d.ID, "m-"))
			if err != nil {
				return bus.Reject(fmt.Errorf("foreign message %q", d.ID))
			}
			time.Sleep(time.Millisecond) // the handler's work
			p.handled(d.Key, seq)
			return nil
		}, bus.WithGroup("workers"), bus.WithKeyOrdering(), bus.WithMaxInFlight(4),
			bus.WithAckTimeout(pauseAckTimeout), startFrom(member))
		require.NoError(t, err, "subscribe %s", consumer)
		subs = append(subs, sub)
	}

	stop := make(chan struct{})
	paused := make(chan struct{})
	go func() {
		defer close(paused)
		p.pauseRepeatedly(stop)
	}()
	t.Cleanup(func() { close(stop); <-paused })
	p.publish(pub)
	lastPublish := time.Now()
	assert.Eventually(t, func() bool { return p.ledger.Summary().Lost == 0 }, pauseDrainWithin, poll,
		"every message is handled within %v of the last Publish (ack timeout %v); still missing (first 20): %v",
		pauseDrainWithin, pauseAckTimeout, p.ledger.Lost())
	drained := time.Since(lastPublish)

	s := p.ledger.Log(t, t.Name())
	p.mu.Lock()
	violations, firstBad := p.violations, p.firstBad
	p.mu.Unlock()
	t.Logf("pause %s: members=%d partitions=%d order_violations=%d drained %v after the last publish; observer events: %s",
		t.Name(), members, partitions, violations, drained.Round(time.Millisecond), p.events.String())
	defer p.events.logFirst(t)
	defer p.logGroups(pub)
	assert.Zero(t, s.Lost, "lost: messages whose Publish returned nil and no handler received")
	assert.Zero(t, violations, "messages handled out of their key's order (first: %s)", firstBad)
	assert.Zero(t, s.Duplicate, "messages handled twice: no handler failed and no lease ran out")
	assert.Zero(t, s.Redelivered, "deliveries with Attempt > 1: no handler ran an earlier attempt")
	for i, sub := range subs {
		select {
		case <-sub.Done():
			t.Errorf("subscription %d ended by itself (err %v)", i, sub.Err())
		default:
		}
	}
}

// logGroups logs, when the case failed, the group of each partition
// of the topic as the broker reports it: its members, what it has pending
// and since when, and its lag. A partition left behind shows there, with
// what it waits for.
func (p *pauseRun) logGroups(pub *bus.Bus) {
	if !p.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	gs, err := pub.Groups(ctx, p.topic)
	if err != nil {
		p.t.Logf("groups of %s: %v", p.topic, err)
		return
	}
	for _, g := range gs {
		p.t.Logf("group %q partition %d of %d: owner %q consumers %v pending %v (oldest %s) lag %v",
			g.Name, g.Partition, g.Partitions, g.Owner, g.Consumers, g.Pending, g.OldestPending.Format("15:04:05.000"), g.Lag)
	}
}

// pauseRepeatedly freezes the server for each of pauseFor, pauseGap
// apart, until stop; it never leaves it frozen.
func (p *pauseRun) pauseRepeatedly(stop <-chan struct{}) {
	for _, d := range pauseFor {
		select {
		case <-stop:
			return
		case <-time.After(pauseGap):
		}
		p.h.PauseServer()
		select {
		case <-stop:
		case <-time.After(d):
		}
		p.h.ResumeServer()
	}
}

// publish publishes the messages m-0 ... of the case, key k(seq mod
// pauseKeys), at pauseRate, retrying a failed batch with the same IDs.
func (p *pauseRun) publish(b *bus.Bus) {
	t := p.t
	tick := time.NewTicker(time.Second * pauseBatch / pauseRate)
	defer tick.Stop()
	n := pauseMessages
	if p.h.PauseMessages > 0 {
		n = p.h.PauseMessages
	}
	for start := 0; start < n; start += pauseBatch {
		<-tick.C // pacing of the publisher, not synchronisation
		msgs := make([]*bus.Message, 0, pauseBatch)
		batchIDs := make([]string, 0, pauseBatch)
		for seq := start; seq < min(start+pauseBatch, n); seq++ {
			id := "m-" + strconv.Itoa(seq)
			batchIDs = append(batchIDs, id)
			msgs = append(msgs, &bus.Message{ID: id, Key: "k" + strconv.Itoa(seq%pauseKeys), Payload: []byte(id)})
		}
		deadline := time.Now().Add(recoverWithin)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			err := b.Publish(ctx, p.topic, msgs...)
			cancel()
			p.ledger.Publish(batchIDs, err)
			if err == nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "publishing %s did not recover within %v: %v", batchIDs[0], recoverWithin, err)
		}
	}
}
