// Package keyledger is the ledger of the key-order crash tests
// (conformance's KeyOrderLedgerThroughACrash and the kafka package's
// own): it records, per key, the sequence numbers the members of a
// key-ordered group handled, and checks that every key was handled in
// publish order, every message at least once, and that only what the
// crashed member had handled was handled again.
package keyledger

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// Messages returns the messages from..to-1 of each of keys keys, with
// keys "k<i>" and payloads "k<i> <seq>", in publish order.
func Messages(keys, from, to int) []*bus.Message {
	var msgs []*bus.Message
	for seq := from; seq < to; seq++ {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq)})
		}
	}
	return msgs
}

// Ledger records what the members handled. Safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	order   map[string][]int       // per key, the sequence numbers in handling order
	first   map[string]map[int]int // per key and sequence number, the member that first handled it
	handled map[string]bool        // message IDs
	members map[string]map[int]bool

	victim     int
	victimKeys map[string]bool
	crashed    time.Time
	resumed    time.Duration
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{order: map[string][]int{}, first: map[string]map[int]int{},
		handled: map[string]bool{}, members: map[string]map[int]bool{}}
}

// Add records that member handled d, a message of Messages.
func (l *Ledger) Add(member int, d *bus.Delivery) {
	var key string
	var seq int
	_, _ = fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order[key] = append(l.order[key], seq)
	if l.first[key] == nil {
		l.first[key] = map[int]int{}
		l.members[key] = map[int]bool{}
	}
	if _, ok := l.first[key][seq]; !ok {
		l.first[key][seq] = member
	}
	l.members[key][member] = true
	if !l.crashed.IsZero() && member != l.victim && l.victimKeys[key] && l.resumed == 0 {
		l.resumed = time.Since(l.crashed)
	}
	l.handled[d.ID] = true
}

// Count returns how many distinct messages were handled.
func (l *Ledger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handled)
}

// Crash records that member died now, with the keys it had handled.
func (l *Ledger) Crash(member int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.victim, l.crashed = member, time.Now()
	l.victimKeys = map[string]bool{}
	for key, ms := range l.members {
		if ms[member] {
			l.victimKeys[key] = true
		}
	}
}

// Resumed returns how long after Crash another member first handled a
// key the crashed member had handled (0: none yet), and how many keys
// that member had handled.
func (l *Ledger) Resumed() (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resumed, len(l.victimKeys)
}

// Check asserts that each of keys keys was handled in publish order and
// every message of it at least once (perKey each), and that a message
// handled again was one the crashed member (see Crash) had handled
// first, never one after a later message of its key was handled.
func (l *Ledger) Check(t testing.TB, keys, perKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		top := -1
		for _, seq := range l.order[key] {
			if seq <= top {
				require.False(t, l.crashed.IsZero(), "key %s: %d handled again though no member crashed: %v", key, seq, l.order[key])
				require.Equal(t, l.victim, l.first[key][seq], "key %s: %d handled again though the crashed member never had it: %v", key, seq, l.order[key])
				continue
			}
			require.Equal(t, top+1, seq, "key %s skipped ahead to %d after %d: %v", key, seq, top, l.order[key])
			top = seq
		}
		require.Equal(t, perKey-1, top, "key %s: every message handled", key)
	}
}
