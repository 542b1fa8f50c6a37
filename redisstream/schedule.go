package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Messages published with a DeliverAt still to come (backend.HeaderDeliverAt)
// are held at the server: their fields go to the topic's schedule stream
// and their IDs to the due ZSET (pubScript), both hash-tagged with
// the topic. The promoter of every member process of the topic moves the
// due ones into the stream in one atomic script (promoteScript), so no
// group sees a message before it is due, and one that was due while no
// member ran is promoted when the next one starts: held, never lost.

// promoteBatch is how many due messages one promoter script call moves.
const promoteBatch = 512

// schedPoll is how often the promoter looks at a schedule that holds
// messages, at most: a message scheduled by another process is promoted
// within about this long of its due time, or of its publish if that is
// later.
const schedPoll = 50 * time.Millisecond

// wakePromoterIfHeld makes this process's promoter of topic, if it runs,
// look at the schedule now when the batch held a message (due has a
// time), so it learns of an earlier due time.
func (b *Backend) wakePromoterIfHeld(topic string, due []int64) {
	if due == nil {
		return
	}
	b.mu.Lock()
	ts := b.topics[topic]
	b.mu.Unlock()
	if ts != nil {
		ts.wake()
	}
}

// promoteDue moves the due messages of the schedule into the stream and
// records when the next one is due (0: none).
func (t *topicState) promoteDue(ctx context.Context) error {
	trim := t.b.trimArgs()
	for {
		args := append([]any{time.Now().UnixMilli(), promoteBatch}, trim...)
		res, err := promoteScript.Run(ctx, t.b.client, []string{t.keys.stream, t.keys.sched, t.keys.due}, args...).Int64Slice()
		if err != nil {
			return err
		}
		if len(res) != 2 {
			return fmt.Errorf("unexpected promoter reply %v", res)
		}
		next := res[1]
		if next < 0 {
			next = 0
		}
		t.nextDue.Store(next)
		if res[0] < promoteBatch {
			return nil
		}
	}
}

// wait is how long the promoter sleeps: its tick, shorter while the
// schedule holds messages (schedPoll, or until the next is due).
func (t *topicState) wait() time.Duration {
	d := t.currentTick()
	if next := t.nextDue.Load(); next > 0 {
		d = min(d, schedPoll, max(time.Until(time.UnixMilli(next)), 0))
	}
	return d
}

// scheduled returns the count of held messages and the next due time.
func scheduled(ctx context.Context, c redis.UniversalClient, k keys) (int64, time.Time, error) {
	n, err := c.ZCard(ctx, k.due).Result()
	if err != nil || n == 0 {
		return n, time.Time{}, err
	}
	first, err := c.ZRangeWithScores(ctx, k.due, 0, 0).Result()
	if err != nil || len(first) == 0 {
		return n, time.Time{}, err
	}
	return n, time.UnixMilli(int64(first[0].Score)), nil
}
