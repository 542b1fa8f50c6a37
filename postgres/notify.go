package postgres

import (
	"context"
	"sync"
	"time"
)

// notifyEvery is the least time between two notifications of a topic
// that Publish sends from one Backend. A notification wakes every idle
// subscription of the topic, and NOTIFY serialises the commits that send
// one; a busy topic needs far fewer than one per publish. It is
// drainedWait: a member that fetched what there was fetches again at
// most drainedWait later whether notified or not, so a notification
// sooner would only make its fetches smaller and more.
const notifyEvery = drainedWait

// notifier limits the notifications of a Backend's publishes. A publish
// whose topic was notified less than notifyEvery ago sends none in its
// transaction; once it has committed, it asks the notifier for one,
// which sends it on a connection of the pool when notifyEvery has passed.
// So every commit that sent no notification is followed by one sent
// after it, and an idle consumer waits at most notifyEvery longer.
type notifier struct {
	mu      sync.Mutex
	last    map[string]time.Time // last notification sent or claimed
	pending map[string]bool
	// lone holds the topics that the last publish that claimed a
	// notification found without a group.
	lone map[string]bool
	kick chan struct{}
	// force, when not 0, makes every publish claim a notification (1),
	// or every publish to a topic claimed before as if it came within
	// notifyEvery of that claim (-1): for tests of either statement.
	force int
}

func newNotifier() *notifier {
	return &notifier{last: map[string]time.Time{}, pending: map[string]bool{}, lone: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// saw records whether a publish that claimed a notification of topic
// found a group of it.
func (n *notifier) saw(topic string, grouped bool) {
	n.mu.Lock()
	if grouped {
		delete(n.lone, topic)
	} else {
		n.lone[topic] = true
	}
	n.mu.Unlock()
}

// grouped reports whether topic may have a group: unless the last
// publish that claimed a notification of it found none.
func (n *notifier) grouped(topic string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.lone[topic]
}

// forget makes the next publish to topic claim a notification (and so
// record the topic's row and read its groups), and drops what is known
// of its groups: the topic was deleted, or a group of it created.
func (n *notifier) forget(topic string) {
	n.mu.Lock()
	delete(n.last, topic)
	delete(n.lone, topic)
	n.mu.Unlock()
}

// claim reports whether a publish to topic sends the notification in its
// own transaction, and records it when it does. The publish then takes
// over a notification of the topic asked for (later) and not yet sent:
// the one it sends at its commit comes after the commits that asked for
// it. covered reports whether there was one; the caller asks for it again
// when its publish sends none.
func (n *notifier) claim(topic string) (claimed, covered bool) {
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if last, seen := n.last[topic]; n.force < 0 && seen || n.force == 0 && now.Sub(last) < notifyEvery {
		return false, false
	}
	n.last[topic] = now
	covered = n.pending[topic]
	delete(n.pending, topic)
	return true, covered
}

// later asks for a notification of topic, sent after the caller's commit.
// The notifier is woken only for a topic not pending already: it has
// the others in hand, sent or timed.
func (n *notifier) later(topic string) {
	n.mu.Lock()
	asked := n.pending[topic]
	n.pending[topic] = true
	n.mu.Unlock()
	if !asked {
		wake(n.kick)
	}
}

// run sends the notifications asked for until life ends.
func (n *notifier) run(life context.Context, b *Backend) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-life.Done():
			return
		case <-n.kick:
		case <-timer.C:
		}
		topics, wait := n.due()
		if len(topics) > 0 {
			ctx, cancel := context.WithTimeout(life, 5*time.Second)
			// A failed notification leaves the subscriptions to their poll.
			_, _ = b.pool.Exec(ctx, `SELECT pg_notify($1, t) FROM unnest($2::text[]) t`, b.opts.Channel, topics)
			cancel()
		}
		if wait > 0 {
			timer.Reset(wait)
		}
	}
}

// due returns the pending topics whose last notification is notifyEvery
// old, marking them notified now, and how long until the next of the
// others is due (0: none pending).
func (n *notifier) due() ([]string, time.Duration) {
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	var topics []string
	var wait time.Duration
	for t := range n.pending {
		if left := notifyEvery - now.Sub(n.last[t]); left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		topics = append(topics, t)
		n.last[t] = now
		delete(n.pending, t)
	}
	return topics, wait
}

// dueSoon is called after a settlement committed that makes a delivery
// of topic due in delay. The subscriptions of this process are woken to
// re-read their next due time. A member elsewhere waits at most
// Options.Block for the next due time it last read, so it sees a delay of
// Block or more on time by itself; a shorter one is notified (as a
// publish is), waking the topic's members in every process.
func (b *Backend) dueSoon(topic string, delay time.Duration) {
	b.lis.wakeTopic(topic)
	if delay < b.opts.Block {
		b.notes.later(topic)
	}
}
