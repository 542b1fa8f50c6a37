package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Topics lists the Kafka topics but the broker's internal ones, with the
// records they retain (end less start offsets) and the records ever
// produced to them (the end offsets, which only grow). Sizes, times and
// scheduled counts are unknown.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	td, err := b.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: topics: %w", err)
	}
	names := td.Names()
	if len(names) == 0 {
		return nil, nil
	}
	starts, ends, err := b.bounds(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: topics: %w", err)
	}
	out := make([]backend.TopicInfo, 0, len(names))
	for _, name := range names {
		var retained, published int64
		for p, end := range ends[name] {
			published += end
			retained += end - starts[name][p]
		}
		out = append(out, backend.TopicInfo{Name: name, Messages: backend.Figure(retained), Bytes: backend.Unknown,
			Published: backend.Figure(published), Scheduled: backend.Unknown})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// bounds returns the start and end offsets of every partition of topics.
func (b *Backend) bounds(ctx context.Context, topics ...string) (starts, ends map[string]map[int32]int64, err error) {
	ls, err := b.adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = ls.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	le, err := b.adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = le.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	starts, ends = map[string]map[int32]int64{}, map[string]map[int32]int64{}
	ls.Each(func(o kadm.ListedOffset) {
		if starts[o.Topic] == nil {
			starts[o.Topic] = map[int32]int64{}
		}
		starts[o.Topic][o.Partition] = o.Offset
	})
	le.Each(func(o kadm.ListedOffset) {
		if ends[o.Topic] == nil {
			ends[o.Topic] = map[int32]int64{}
		}
		ends[o.Topic][o.Partition] = o.Offset
	})
	return starts, ends, nil
}

// Groups lists the consumer groups with offsets on topic. Pending and lag
// come from each partition's commit: pending is the unsettled records the
// commit metadata lists, lag the records after the committed offset the
// group has neither settled nor received. Consumers is the group's
// members.
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	kt := kafkaTopic(topic)
	listed, err := b.adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: groups of %q: %w", topic, err)
	}
	names := listed.Groups()
	if len(names) == 0 {
		return nil, nil
	}
	fetched := b.adm.FetchManyOffsets(ctx, names...)
	if err := fetched.Error(); err != nil {
		return nil, fmt.Errorf("kafka: groups of %q: %w", topic, err)
	}
	starts, ends, err := b.bounds(ctx, kt)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("kafka: groups of %q: %w", topic, err)
		}
		return nil, nil // no such topic: no groups
	}
	described, _ := b.adm.DescribeGroups(ctx, names...)
	var out []backend.GroupInfo
	for _, name := range names {
		offs, ok := fetched[name].Fetched[kt]
		if !ok || len(offs) == 0 {
			continue
		}
		gi := backend.GroupInfo{Name: name, Consumers: backend.Unknown}
		if d, ok := described[name]; ok && d.Err == nil {
			gi.Consumers = backend.Figure(len(d.Members))
		}
		var pending, lag int64
		for p, end := range ends[kt] {
			o, ok := offs[p]
			c := starts[kt][p]
			var meta partMeta
			if ok && o.Err == nil && o.At >= 0 {
				c = max(o.At, c)
				meta = decodeMeta(o.At, o.Metadata)
			}
			received := int64(0)
			for off := range meta.done {
				if off >= c && off < end {
					received++
				}
			}
			for off := range meta.attempts {
				if off >= c && off < end {
					received++
					pending++
				}
			}
			lag += max(end-c-received, 0)
		}
		gi.Pending, gi.Lag = backend.Figure(pending), backend.Figure(lag)
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Peek reads up to n retained records of topic, merged across partitions
// by publish time. The cursor holds each partition's next offset.
func (b *Backend) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	kt := kafkaTopic(topic)
	starts, ends, err := b.bounds(ctx, kt)
	if err != nil {
		return nil, "", fmt.Errorf("kafka: peek %q: %w", topic, err)
	}
	from, err := parseCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("kafka: peek %q: %w", topic, err)
	}
	for p, s := range starts[kt] {
		if o, ok := from[p]; !ok || o < s {
			from[p] = s
		}
	}
	recs, err := b.scan(ctx, kt, from, ends[kt], n)
	if err != nil {
		return nil, "", fmt.Errorf("kafka: peek %q: %w", topic, err)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Timestamp.Before(recs[j].Timestamp) })
	if len(recs) > n {
		recs = recs[:n]
	}
	next := map[int32]int64{}
	for p, o := range from {
		next[p] = o
	}
	out := make([]*backend.Message, len(recs))
	for i, r := range recs {
		out[i] = &backend.Message{}
		decode(r, out[i])
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
	}
	more := false
	for p, end := range ends[kt] {
		more = more || next[p] < end
	}
	if !more {
		return out, "", nil
	}
	return out, formatCursor(next), nil
}

// Delete removes the listed records of topic. Kafka removes only a
// partition's oldest records (DeleteRecords), so Delete first appends
// again, with their key, headers, payload and timestamp, the records not
// listed that lie before the last listed one of their partition, and
// then removes everything up to that one: a crash in between may leave
// such a record twice, never remove it.
func (b *Backend) Delete(ctx context.Context, topic string, ids []string) (int, error) {
	return b.deleteWhere(ctx, topic, backend.HasID(ids))
}

// DeleteCopies removes the records of topic that equal one of msgs in ID
// and headers (backend.CopyDeleter), as Delete does.
func (b *Backend) DeleteCopies(ctx context.Context, topic string, msgs []*backend.Message) (int, error) {
	return b.deleteWhere(ctx, topic, backend.SameCopy(msgs))
}

// deleteWhere removes the records of topic whose messages match, as
// Delete describes.
func (b *Backend) deleteWhere(ctx context.Context, topic string, match func(*backend.Message) bool) (int, error) {
	kt := kafkaTopic(topic)
	starts, ends, err := b.bounds(ctx, kt)
	if err != nil {
		return 0, nil // no such topic: nothing found
	}
	recs, err := b.scan(ctx, kt, starts[kt], ends[kt], 0)
	if err != nil {
		return 0, fmt.Errorf("kafka: delete from %q: %w", topic, err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
	cut := map[int32]int64{}
	listed := make([]bool, len(recs))
	removed := 0
	var m backend.Message
	for i, r := range recs {
		decode(r, &m)
		if match(&m) {
			listed[i] = true
			cut[r.Partition] = r.Offset + 1
			removed++
		}
	}
	if removed == 0 {
		return 0, nil
	}
	var keep []*kgo.Record
	for i, r := range recs {
		if !listed[i] && r.Offset < cut[r.Partition] {
			keep = append(keep, &kgo.Record{Topic: kt, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
		}
	}
	if len(keep) > 0 {
		if err := b.pub.ProduceSync(ctx, keep...).FirstErr(); err != nil {
			return 0, fmt.Errorf("kafka: delete from %q: append the records kept: %w", topic, err)
		}
	}
	offs := kadm.Offsets{}
	for p, o := range cut {
		offs.AddOffset(kt, p, o, -1)
	}
	resp, err := b.adm.DeleteRecords(ctx, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: delete from %q: %w", topic, err)
	}
	return removed, nil
}

// scan reads the records of kt from each partition's offset in from up to
// its end offset, at most n of each partition (n <= 0: all).
func (b *Backend) scan(ctx context.Context, kt string, from, ends map[int32]int64, n int) ([]*kgo.Record, error) {
	parts := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p, end := range ends {
		if o := from[p]; o < end {
			parts[p] = kgo.NewOffset().At(o)
			left[p] = end - o
			if n > 0 {
				left[p] = min(left[p], int64(n))
			}
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(b.opts.clientOpts(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{kt: parts}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if left[r.Partition] <= 0 || r.Offset >= ends[r.Partition] {
				return
			}
			out = append(out, r)
			if left[r.Partition]--; left[r.Partition] == 0 {
				delete(left, r.Partition)
			}
		})
		for p := range left {
			// A partition whose remaining offsets hold no record (a
			// transaction marker, say) ends at its last polled offset.
			if pos, ok := lastOffset(out, p); ok && pos+1 >= ends[p] {
				delete(left, p)
			}
		}
	}
	return out, nil
}

func lastOffset(recs []*kgo.Record, p int32) (int64, bool) {
	off, ok := int64(-1), false
	for _, r := range recs {
		if r.Partition == p && r.Offset > off {
			off, ok = r.Offset, true
		}
	}
	return off, ok
}

// parseCursor reads "p:offset,p:offset".
func parseCursor(c string) (map[int32]int64, error) {
	out := map[int32]int64{}
	if c == "" {
		return out, nil
	}
	for item := range strings.SplitSeq(c, ",") {
		ps, os, ok := strings.Cut(item, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("%w: cursor %q", backend.ErrInvalidOption, c)
		}
		out[int32(p)] = o
	}
	return out, nil
}

func formatCursor(m map[int32]int64) string {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(p), 10) + ":" + strconv.FormatInt(m[p], 10))
	}
	return b.String()
}

var (
	_ backend.TopicDeleter = (*Backend)(nil)
	_ backend.GroupSeeker  = (*Backend)(nil)
)

// DeleteTopic deletes the Kafka topic of topic and the offsets groups
// committed on it, and waits until the brokers no longer list it. A live
// subscription on it ends with an error or, when it publishes, the topic
// comes back empty.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	kt := kafkaTopic(topic)
	b.mu.Lock()
	delete(b.topics, kt)
	b.mu.Unlock()
	if listed, err := b.adm.ListGroups(ctx); err == nil {
		fetched := b.adm.FetchManyOffsets(ctx, listed.Groups()...)
		for g, r := range fetched {
			if _, ok := r.Fetched[kt]; ok {
				_, _ = b.adm.DeleteOffsets(ctx, g, kadm.TopicsSet{kt: {}})
			}
		}
	}
	resp, err := b.adm.DeleteTopics(ctx, kt)
	if err == nil {
		if r, ok := resp[kt]; ok && r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			err = r.Err
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: delete topic %q: %w", topic, err)
	}
	for {
		td, err := b.adm.ListTopics(ctx, kt)
		gone := err == nil && (!td.Has(kt) || errors.Is(td[kt].Err, kerr.UnknownTopicOrPartition))
		if gone {
			// The producer forgets the topic's ID, so a Publish
			// creates it anew.
			b.pub.PurgeTopicsFromProducing(kt)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: delete topic %q: wait for the brokers: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SeekGroup commits the target offsets for every partition of topic, with
// no metadata, so the group reads from them on. Kafka takes such a commit
// only from a group without members: with members live it fails with an
// error saying so. Deliveries a member had in flight are dropped with it.
func (b *Backend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	kt := kafkaTopic(topic)
	got, err := b.adm.FetchOffsetsForTopics(ctx, group, kt)
	if err != nil {
		return fmt.Errorf("kafka: seek group %q of %q: %w", group, topic, err)
	}
	known := false
	for _, o := range got[kt] {
		known = known || o.At >= 0
	}
	if !known {
		return fmt.Errorf("kafka: seek group %q of %q: %w: %w", group, topic, backend.ErrNotFound, backend.ErrUnknownGroup)
	}
	var listed kadm.ListedOffsets
	switch {
	case to.Oldest:
		listed, err = b.adm.ListStartOffsets(ctx, kt)
	case to.Newest:
		listed, err = b.adm.ListEndOffsets(ctx, kt)
	default:
		listed, err = b.adm.ListOffsetsAfterMilli(ctx, to.Time.UnixMilli(), kt)
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: seek group %q of %q: %w", group, topic, err)
	}
	resp, err := b.adm.CommitOffsets(ctx, group, listed.Offsets())
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
		return fmt.Errorf("kafka: seek group %q of %q: the group has live members; stop them first: %w", group, topic, err)
	}
	if err != nil {
		return fmt.Errorf("kafka: seek group %q of %q: %w", group, topic, err)
	}
	return nil
}

// BoundRetention caps topic's Kafka topic by age: it sets the topic's
// retention.ms to bound.MaxAge and its segment.ms to half of it (Kafka
// deletes whole segments, and rolls one only when it is segment.ms old),
// so the broker's retention check (log.retention.check.interval.ms,
// 5 minutes by default) deletes what is older than about 1.5 × MaxAge.
// Kafka keeps no count of a topic's messages by which to cap it:
// bound.MaxLen is not applied, and a bound with MaxLen only changes
// nothing. The bus calls it for the lifecycle events topic.
func (b *Backend) BoundRetention(ctx context.Context, topic string, bound backend.RetentionBound) error {
	if bound.MaxAge <= 0 {
		return nil
	}
	kt := kafkaTopic(topic)
	if _, err := b.ensureTopic(ctx, kt); err != nil {
		return fmt.Errorf("kafka: bound retention of %q: %w", topic, err)
	}
	age := strconv.FormatInt(max(bound.MaxAge.Milliseconds(), 1), 10)
	segment := strconv.FormatInt(max(bound.MaxAge.Milliseconds()/2, 1), 10)
	resps, err := b.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: &age},
		{Op: kadm.SetConfig, Name: "segment.ms", Value: &segment},
	}, kt)
	if err == nil {
		for _, r := range resps {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: bound retention of %q: %w", topic, err)
	}
	return nil
}
