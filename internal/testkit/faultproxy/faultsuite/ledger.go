package faultsuite

import (
	"slices"
	"sync"
	"testing"
)

// Ledger accounts for every message of a case: which IDs Publish accepted
// (returned nil for), which calls failed, and which IDs handlers received.
// It is safe for concurrent use.
type Ledger struct {
	mu            sync.Mutex
	published     map[string]bool // Publish returned nil
	publishErrors int
	delivered     map[string]int // handler calls per ID
	redelivered   int            // deliveries with Attempt > 1
	byConsumer    map[string]int // handler calls per consumer label
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{published: map[string]bool{}, delivered: map[string]int{}, byConsumer: map[string]int{}}
}

// Publish records the outcome of a Publish of ids.
func (l *Ledger) Publish(ids []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.publishErrors++
		return
	}
	for _, id := range ids {
		l.published[id] = true
	}
}

// Deliver records that consumer's handler received id.
func (l *Ledger) Deliver(consumer, id string, attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[id]++
	l.byConsumer[consumer]++
	if attempt > 1 {
		l.redelivered++
	}
}

// Summary is the ledger's counts.
type Summary struct {
	Published     int // IDs whose Publish returned nil
	PublishErrors int // Publish calls that returned an error
	Delivered     int // handler calls
	Unique        int // distinct IDs delivered
	Redelivered   int // deliveries with Attempt > 1
	Duplicate     int // handler calls past the first per ID
	Lost          int // published IDs never delivered
}

// Summary computes the counts.
func (l *Ledger) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Summary{Published: len(l.published), PublishErrors: l.publishErrors, Unique: len(l.delivered), Redelivered: l.redelivered}
	for _, n := range l.delivered {
		s.Delivered += n
		s.Duplicate += n - 1
	}
	for id := range l.published {
		if l.delivered[id] == 0 {
			s.Lost++
		}
	}
	return s
}

// DeliveredTo returns how many deliveries consumer's handler got.
func (l *Ledger) DeliveredTo(consumer string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byConsumer[consumer]
}

// Lost returns up to 20 published IDs never delivered, sorted.
func (l *Ledger) Lost() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.published {
		if l.delivered[id] == 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids[:min(len(ids), 20)]
}

// Log writes the ledger as one line and returns its summary.
func (l *Ledger) Log(t testing.TB, name string) Summary {
	t.Helper()
	s := l.Summary()
	t.Logf("ledger %s: published=%d publish_errors=%d delivered=%d unique=%d redelivered=%d duplicate=%d lost=%d",
		name, s.Published, s.PublishErrors, s.Delivered, s.Unique, s.Redelivered, s.Duplicate, s.Lost)
	return s
}
