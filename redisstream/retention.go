package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// trimLimit bounds the entries one approximate XTRIM removes: Redis frees
// whole nodes of the stream up to it, and the exact trim that follows
// visits at most one node.
const trimLimit = 10_000

// idleAfter is how long a topic the backend published to stays in its
// trim set with no publish and nothing to trim: ten trim intervals, at
// least five minutes.
func idleAfter(interval time.Duration) time.Duration {
	return max(10*interval, 5*time.Minute)
}

// notePublished adds topic to the topics the backend trims on its own
// (under RetainSettled; bounded topics are in the set already) and
// starts the trim loop with the first one. It costs a map lookup for a
// known topic.
func (b *Backend) notePublished(topic string) {
	if b.opts.Retention != RetainSettled {
		return
	}
	if b.trims.Add(topic) {
		b.startTrimLoop()
	}
}

// startTrimLoop starts the loop that trims the published and bounded
// topics every TrimInterval, once.
func (b *Backend) startTrimLoop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.trimCancel != nil || b.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.trimCancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.runTrimLoop(ctx)
	}()
}

// runTrimLoop trims, every TrimInterval, each topic the backend published
// to: what every group settled (RetainSettled) and what lies past the
// topic's retention bound. A process that only publishes thus keeps its
// topics trimmed with no subscriber running.
func (b *Backend) runTrimLoop(ctx context.Context) {
	ticker := time.NewTicker(b.opts.TrimInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for _, t := range b.trims.Snapshot() {
			if ctx.Err() != nil {
				return
			}
			// A failed trim is retried on the next tick; the trimmer of a
			// subscribed topic reports failures to its observer.
			if n, err := b.trimTopic(ctx, t.Name, t.Bound); err == nil {
				b.trims.Trimmed(t.Name, n, idleAfter(b.opts.TrimInterval))
			}
		}
	}
}

// trimTopic runs one trim of topic, bounded by passTimeout, and returns
// how many settled entries it removed.
func (b *Backend) trimTopic(ctx context.Context, topic string, bound backend.RetentionBound) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	stream := newKeys(b.opts.Prefix, topic).stream
	var removed atomic.Int64 // written by fn, which may outlive the call
	err := b.async(ctx, func(ctx context.Context) error {
		if b.opts.Retention == RetainSettled {
			n, err := trimSettled(ctx, b.client, stream)
			if err != nil {
				return err
			}
			removed.Store(n)
		}
		if bound.MaxAge > 0 {
			minID := strconv.FormatInt(time.Now().Add(-bound.MaxAge).UnixMilli(), 10)
			if err := b.client.XTrimMinIDApprox(ctx, stream, minID, trimLimit).Err(); err != nil && !isNoSuchKey(err) {
				return err
			}
		}
		if bound.MaxLen > 0 {
			if err := b.client.XTrimMaxLenApprox(ctx, stream, bound.MaxLen, trimLimit).Err(); err != nil && !isNoSuchKey(err) {
				return err
			}
		}
		return nil
	})
	return removed.Load(), err
}

// TrimSettled trims what every group of topic settled (RetainSettled;
// other retentions trim nothing), within ctx: the bus calls it when a
// subscription closes. It implements backend.SettledTrimmer.
func (b *Backend) TrimSettled(ctx context.Context, topic string) error {
	if b.opts.Retention != RetainSettled {
		return nil
	}
	if b.isClosed() {
		return fmt.Errorf("redisstream: trim %q: %w", topic, backend.ErrClosed)
	}
	stream := newKeys(b.opts.Prefix, topic).stream
	err := b.async(ctx, func(ctx context.Context) error {
		_, err := trimSettled(ctx, b.client, stream)
		return err
	})
	if err != nil {
		return fmt.Errorf("redisstream: trim %q: %w", topic, err)
	}
	return nil
}

// BoundRetention caps topic's stream at about bound.MaxLen entries with
// MAXLEN ~ on every XADD of this Backend (and XTRIM MAXLEN ~ every
// TrimInterval), and drops the entries older than bound.MaxAge with XTRIM
// MINID ~ every TrimInterval, whether or not the topic has groups or
// subscribers. "About" is Redis's approximate trimming: it frees whole
// stream nodes, so up to one node (stream-node-max-entries, 100 by
// default) more stays. It implements backend.RetentionBounder and does
// no I/O.
func (b *Backend) BoundRetention(_ context.Context, topic string, bound backend.RetentionBound) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: bound retention of %q: %w", topic, backend.ErrClosed)
	}
	if bound.MaxLen < 0 || bound.MaxAge < 0 {
		return fmt.Errorf("redisstream: bound retention of %q: %w: negative bound", topic, ErrInvalidOption)
	}
	var args []any
	if bound.MaxLen > 0 {
		args = []any{"MAXLEN", "~", bound.MaxLen}
	}
	b.trims.SetBound(topic, bound)
	b.pubTopicOf(topic).trim.Store(&args)
	b.bounded.Store(true)
	b.startTrimLoop()
	return nil
}
