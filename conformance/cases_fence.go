package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	bus "github.com/eventbus-go/bus"
)

// lockLink stands for each member's link to the store of the group locks:
// it records the holder that last held a lock and can cut that holder
// off, so that its LockGroup calls fail while its deliveries still reach
// the broker. Safe for concurrent use.
type lockLink struct {
	mu   sync.Mutex
	last string
	cut  string
}

var errLockLinkCut = errors.New("conformance: the link to the lock store is cut")

func (l *lockLink) held(holder string) {
	l.mu.Lock()
	l.last = holder
	l.mu.Unlock()
}

func (l *lockLink) isCut(holder string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut != "" && l.cut == holder
}

// cutHolder cuts off the holder that last held a lock.
func (l *lockLink) cutHolder() {
	l.mu.Lock()
	l.cut = l.last
	l.mu.Unlock()
}

// testKeyOrderFencedMember: the member that holds a key-ordered group's
// lock loses its link to the lock store while it runs a key's head; its
// deliveries still reach the broker, so it could keep their leases alive.
// It fences itself: its handler is cancelled with ErrLeaseLost, and the
// other member, once it holds the lock, handles the key from that head on,
// in order, while the fenced member starts nothing more.
func testKeyOrderFencedMember(t *testing.T, s *suite) { runFencedMember(t, s, false) }

// testKeyOrderFencedHandlerSucceeds: as testKeyOrderFencedMember, but the
// cancelled handler returns nil: it handled its message, which is acked
// rather than given back. The other member handles the rest of the key,
// in order, and never the head again.
func testKeyOrderFencedHandlerSucceeds(t *testing.T, s *suite) { runFencedMember(t, s, true) }

// runFencedMember fences the member that runs a key's head. The head's
// handler returns nil once cancelled when succeed is set, else its ctx's
// error.
func runFencedMember(t *testing.T, s *suite, succeed bool) {
	h := s.newHarness(t)
	h.locker(t)
	topic, group := h.topic("fence"), h.group("fence")
	log := newKeyLog()
	var blocked atomic.Bool
	var afterCut atomic.Int64
	cause := make(chan error, 1)
	handler := func(ctx context.Context, d *bus.Delivery) error {
		if blocked.CompareAndSwap(false, true) {
			// The first head: held until the member is fenced.
			if succeed {
				log.start(d)
			}
			<-ctx.Done()
			trySend(cause, context.Cause(ctx))
			if succeed {
				log.end(d, true)
				return nil
			}
			return ctx.Err()
		}
		log.start(d)
		log.end(d, true)
		return nil
	}
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8), bus.WithAckTimeout(s.ackTimeout())}
	h.subscribe(context.Background(), topic, handler, opts...)
	msgs := keyed(1, 4)
	h.publish(topic, msgs...)
	s.eventually(t, blocked.Load, "the holder runs the key's head")
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		afterCut.Add(1)
		return handler(ctx, d)
	}, opts...)
	h.be.locks.cutHolder()
	select {
	case err := <-cause:
		assert.ErrorIs(t, err, bus.ErrLeaseLost, "the fenced member's handler is cancelled with ErrLeaseLost")
	case <-time.After(s.deadline()):
		t.Fatal("the member whose link to the lock store was cut kept running its handler")
	}
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(msgs)) }, "the other member handles the key")
	log.assertInOrder(t, msgs)
	if succeed {
		assert.Equal(t, int64(len(msgs)-1), afterCut.Load(), "the other member handled the rest of the key, not the head the fenced member handled")
		return
	}
	assert.Equal(t, int64(len(msgs)), afterCut.Load(), "only the other member handled the key after the cut")
}
