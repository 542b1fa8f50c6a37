package rabbitmq

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// maxName is the longest AMQP exchange or queue name.
const maxName = 255

// exchangeName is the exchange of topic: "bus.t.<topic>" (topics are at
// most 200 bytes).
func (b *Backend) exchangeName(topic string) string { return b.opts.Prefix + ".t." + topic }

// queueName is the quorum queue of group on topic: "bus.q.<topic>/<group>",
// or, past 255 bytes, "bus.q.<sha256 of topic/group>". Topics hold no '/',
// so distinct pairs never share a name.
func (b *Backend) queueName(topic, group string) string { return b.groupName("q", topic, group) }

// lockName is the exclusive queue of the lock of group on topic:
// "bus.lock.<topic>/<group>", hashed as queueName does.
func (b *Backend) lockName(topic, group string) string { return b.groupName("lock", topic, group) }

// lockStateName is the queue that keeps how the lock of group on topic
// last changed hands: "bus.lockstate.<topic>/<group>", hashed as
// queueName does.
func (b *Backend) lockStateName(topic, group string) string {
	return b.groupName("lockstate", topic, group)
}

// notesName is the quorum queue of the release notes of group on topic
// (see Subscription.giveBackToHead): "bus.notes.<topic>/<group>", hashed
// as queueName does.
func (b *Backend) notesName(topic, group string) string { return b.groupName("notes", topic, group) }

// groupName is "<prefix>.<kind>.<topic>/<group>", or, past 255 bytes,
// "<prefix>.<kind>.<sha256 of topic/group>".
func (b *Backend) groupName(kind, topic, group string) string {
	n := b.opts.Prefix + "." + kind + "." + topic + "/" + group
	if len(n) <= maxName {
		return n
	}
	sum := sha256.Sum256([]byte(topic + "/" + group))
	return b.opts.Prefix + "." + kind + "." + hex.EncodeToString(sum[:])
}

// holdName is the hold exchange and queue of one fixed delay:
// "bus.hold.<ms>".
func (b *Backend) holdName(d time.Duration) string {
	return b.opts.Prefix + ".hold." + strconv.FormatInt(d.Milliseconds(), 10)
}

// topicHoldName is the hold exchange and queue of one fixed delay for
// messages published with a DeliverAt: "bus.at.<ms>".
func (b *Backend) topicHoldName(d time.Duration) string {
	return b.opts.Prefix + ".at." + strconv.FormatInt(d.Milliseconds(), 10)
}

// dueName is the direct exchange the topic holds dead-letter to; each
// topic's exchange is bound to it with its own name as the key:
// "bus.due".
func (b *Backend) dueName() string { return b.opts.Prefix + ".due" }

// holdDelays are the fixed delays of the hold queues. A delay is carried
// by the longest hold not past it, again and again (the copy carries its
// due time), and the rest under the shortest by it: a message comes back
// at most that late, and never early.
var holdDelays = []time.Duration{
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 12 * time.Hour,
}

// holdFor returns the hold delay for a remaining wait d > 0.
func holdFor(d time.Duration) time.Duration {
	h := holdDelays[0]
	for _, x := range holdDelays {
		if x <= d {
			h = x
		}
	}
	return h
}
