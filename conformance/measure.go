package conformance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
)

// MeasureCrashEnv names the environment variable that runs MeasureCrash
// (any value); without it MeasureCrash skips.
const MeasureCrashEnv = "BUS_MEASURE_CRASH"

// MeasureCrash measures what a crash costs a key-ordered group with the
// default ack timeout: three members (partitions of them, when
// partitions > 1), 64 keys published at about 300 messages a second,
// handlers of 5 ms; the member that holds the lock (or the first to
// handle) is killed 3 s in. It logs how long after the kill the
// survivors handled their first message, how long until every key of
// the dead member's had resumed, the longest gap of any other key, and
// checks that no key went out of order and nothing was lost. It takes
// about 45 s; it runs only with MeasureCrashEnv set.
func MeasureCrash(t *testing.T, newBackend NewBackend, partitions int) {
	if os.Getenv(MeasureCrashEnv) == "" {
		t.Skipf("set %s to measure a crash (about 45 s)", MeasureCrashEnv)
	}
	s := &suite{newBackend: newBackend, cfg: config{scale: 1}}
	h := s.newHarness(t)
	h.locker(t)
	topic, group := h.topic("measure"), h.group("measure")
	if partitions > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		require.NoError(t, h.bus.CreateTopic(ctx, topic, partitions))
	}
	const keys, members, rate = 64, 3, 300
	type handled struct {
		member, seq int
		at          time.Time
	}
	var mu sync.Mutex
	log := map[string][]handled{}
	views := make([]*crashtest.Member, members)
	for i := range members {
		views[i] = crashtest.New(h.be)
		b := s.memberBus(t, views[i])
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if views[i].Dead() {
				<-ctx.Done()
				return ctx.Err()
			}
			seq, _ := strconv.Atoi(strings.TrimPrefix(d.ID, d.Key+"-"))
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			if views[i].Dead() {
				<-ctx.Done()
				return ctx.Err()
			}
			mu.Lock()
			log[d.Key] = append(log[d.Key], handled{i, seq, time.Now()})
			mu.Unlock()
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8))
		require.NoError(t, err)
	}
	total := 0
	next := make([]int, keys)
	start := time.Now()
	publishUntil := func(until time.Time) {
		for time.Now().Before(until) {
			batch := make([]*bus.Message, 0, rate/20)
			for range rate / 20 {
				k := total % keys
				batch = append(batch, &bus.Message{ID: fmt.Sprintf("k%02d-%d", k, next[k]), Key: fmt.Sprintf("k%02d", k)})
				next[k]++
				total++
			}
			h.publish(topic, batch...)
			time.Sleep(50 * time.Millisecond)
		}
	}
	publishUntil(start.Add(3 * time.Second))
	// The victim: the member that handled last (it holds the lock, or
	// the most partitions' recent work).
	mu.Lock()
	victim, last := 0, time.Time{}
	for _, hs := range log {
		if x := hs[len(hs)-1]; x.at.After(last) {
			victim, last = x.member, x.at
		}
	}
	mu.Unlock()
	views[victim].Crash()
	crashed := time.Now()
	publishUntil(crashed.Add(10 * time.Second))
	done := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, hs := range log {
			seen := map[int]bool{}
			for _, x := range hs {
				seen[x.seq] = true
			}
			n += len(seen)
		}
		return n
	}
	require.Eventually(t, func() bool { return done() == total }, 90*time.Second, 50*time.Millisecond, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	first := time.Duration(-1)
	var gaps []time.Duration
	var deadKeysResume time.Duration
	var held []string
	violations := 0
	for key, hs := range log {
		top := -1
		var after time.Time
		for _, x := range hs {
			if x.seq <= top {
				continue // a redelivery of what the dead member handled
			}
			if x.seq != top+1 {
				violations++
			}
			top = x.seq
			if !x.at.Before(crashed) && after.IsZero() {
				after = x.at
			}
			if x.member != victim && x.at.After(crashed) && (first < 0 || x.at.Sub(crashed) < first) {
				first = x.at.Sub(crashed)
			}
		}
		if after.IsZero() {
			continue
		}
		gap := after.Sub(crashed)
		gaps = append(gaps, gap)
		if gap > 10*time.Second {
			held = append(held, key)
		}
		if gap > deadKeysResume {
			deadKeysResume = gap
		}
	}
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	t.Logf("%s, %d partition(s): %d messages, %d keys, member %d of %d killed %v in; survivors' first message %v after the kill; keys resumed after the kill: median %v, p90 %v, last %v (%d keys after more than 10 s); order violations %d, lost 0",
		h.be.Capabilities().Name, max(partitions, 1), total, keys, victim, members, crashed.Sub(start).Round(time.Millisecond),
		first.Round(time.Millisecond), median.Round(time.Millisecond), gaps[len(gaps)*9/10].Round(time.Millisecond), deadKeysResume.Round(time.Millisecond), len(held), violations)
	require.Zero(t, violations, "order violations")
}
