package nats_test

import (
	"sort"
	"sync"
	"testing"
)

// ledger accounts for every message of a fault test: what Publish
// accepted, what handlers saw and how each delivery was settled.
type ledger struct {
	mu             sync.Mutex
	published      map[string]bool // Publish returned nil
	publishErrors  int
	deliveries     map[string]int // handler calls per ID
	acked          map[string]int // successful settlements per ID
	deadLettered   map[string]bool
	firstAttempts  map[string]int
	redeliveredIDs map[string]int // highest attempt seen, when > 1
}

func newLedger() *ledger {
	return &ledger{
		published: map[string]bool{}, deliveries: map[string]int{}, acked: map[string]int{},
		deadLettered: map[string]bool{}, firstAttempts: map[string]int{}, redeliveredIDs: map[string]int{},
	}
}

func (l *ledger) publish(id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.publishErrors++
		return
	}
	l.published[id] = true
}

func (l *ledger) deliver(id string, attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries[id]++
	if _, ok := l.firstAttempts[id]; !ok {
		l.firstAttempts[id] = attempt
	}
	if attempt > 1 && attempt > l.redeliveredIDs[id] {
		l.redeliveredIDs[id] = attempt
	}
}

func (l *ledger) ack(id string) {
	l.mu.Lock()
	l.acked[id]++
	l.mu.Unlock()
}

func (l *ledger) deadLetter(id string) {
	l.mu.Lock()
	l.deadLettered[id] = true
	l.mu.Unlock()
}

// counts is the ledger's summary.
type counts struct {
	Published, PublishErrors, Delivered, Acked, DeadLettered, Duplicate, Lost int
}

// summary computes the counts: Duplicate counts settlements of a message
// after its first successful one (the handler saw it again after it was
// done); Lost counts messages Publish accepted that were never acked nor
// dead-lettered.
func (l *ledger) summary() counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := counts{Published: len(l.published), PublishErrors: l.publishErrors, DeadLettered: len(l.deadLettered)}
	for _, n := range l.deliveries {
		c.Delivered += n
	}
	for _, n := range l.acked {
		c.Acked++
		c.Duplicate += n - 1
	}
	for id := range l.published {
		if l.acked[id] == 0 && !l.deadLettered[id] {
			c.Lost++
		}
	}
	return c
}

func (l *ledger) lost() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.published {
		if l.acked[id] == 0 && !l.deadLettered[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (l *ledger) log(t testing.TB, name string) counts {
	t.Helper()
	c := l.summary()
	if c.Duplicate > 0 {
		l.mu.Lock()
		for id, n := range l.acked {
			if n > 1 {
				t.Logf("ledger %s: %s acked %d times, delivered %d times, highest attempt %d", name, id, n, l.deliveries[id], l.redeliveredIDs[id])
			}
		}
		l.mu.Unlock()
	}
	t.Logf("ledger %s: published=%d publish_errors=%d delivered=%d acked=%d dead_lettered=%d duplicate=%d lost=%d",
		name, c.Published, c.PublishErrors, c.Delivered, c.Acked, c.DeadLettered, c.Duplicate, c.Lost)
	return c
}
