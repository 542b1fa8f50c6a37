package nats_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// forEachServer runs f against a private server of each supported kind:
// the embedded one (the newest) and the installed binary (Debian's 2.9,
// which has no message schedules of its own).
func forEachServer(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("embedded", func(t *testing.T) { f(t, natstest.Start(t).URL()) })
	t.Run("installed", func(t *testing.T) { f(t, natstest.StartProcess(t).URL()) })
}

// TestConformanceSchedulingInstalledServer runs the suite's cases on
// delays against the installed nats-server (Debian's 2.9); the other
// runs use the embedded one.
func TestConformanceSchedulingInstalledServer(t *testing.T) {
	t.Parallel()
	url := natstest.StartProcess(t).URL()
	runConformance(t, url, busnats.Options{}, conformance.WithOnly(
		"DeliverAtNeverEarly", "DeliverAtRejected", "NackDelayRespected",
		"ReturnedNackSetsTheDelay", "SnoozeDoesNotCountAnAttempt", "InspectorFigures", "DeleteTopic"))
}

// Messages published after many delayed ones arrive while the delayed
// ones wait: the delayed ones are stored apart and take none of the
// consumer's slots or MaxAckPending, and the inspector counts them.
func TestImmediateMessagesGoAheadOfDelayedOnes(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		const delayed, immediate = 2000, 10
		b := bus.New(connect(t, url, isolated(t, url, busnats.Options{})))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		defer func() { require.NoError(t, b.Close(ctx)) }()
		got := make(chan *bus.Delivery, delayed+immediate)
		_, err := b.Subscribe(ctx, "reminders", func(_ context.Context, d *bus.Delivery) error {
			got <- d
			return nil
		}, bus.WithGroup("g"))
		require.NoError(t, err)

		due := time.Now().Add(time.Hour)
		later := make([]*bus.Message, delayed)
		for i := range later {
			later[i] = &bus.Message{Payload: fmt.Appendf(nil, "later %d", i), DeliverAt: due}
		}
		require.NoError(t, b.Publish(ctx, "reminders", later...))
		now := make([]*bus.Message, immediate)
		for i := range now {
			now[i] = &bus.Message{Payload: fmt.Appendf(nil, "now %d", i)}
		}
		start := time.Now()
		require.NoError(t, b.Publish(ctx, "reminders", now...))
		for i := range immediate {
			select {
			case d := <-got:
				require.True(t, d.DeliverAt.IsZero(), "message %s, due in an hour, arrived", d.ID)
			case <-ctx.Done():
				t.Fatalf("%d of %d immediate messages arrived while %d delayed ones wait", i, immediate, delayed)
			}
		}
		t.Logf("%d immediate messages arrived %v after their publish, behind %d delayed ones", immediate, time.Since(start), delayed)
		ts, err := b.Topics(ctx)
		require.NoError(t, err)
		require.Len(t, ts, 1)
		assert.EqualValues(t, delayed, ts[0].Scheduled, "the delayed messages wait as schedules")
		assert.EqualValues(t, immediate, ts[0].Messages, "the topic holds the immediate ones")
	})
}

// Delayed messages are never handled before their DeliverAt, each
// arrives once with what was published, and among the messages of a key
// due at the same time the publish order holds.
func TestDelayedMessagesAreNeverEarly(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		const n, keys, slots = 300, 10, 6
		b := bus.New(connect(t, url, isolated(t, url, busnats.Options{})))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		defer func() { require.NoError(t, b.Close(ctx)) }()
		type arrival struct {
			d  *bus.Delivery
			at time.Time
		}
		var mu sync.Mutex
		var arrivals []arrival
		_, err := b.Subscribe(ctx, "timers", func(_ context.Context, d *bus.Delivery) error {
			at := time.Now()
			mu.Lock()
			arrivals = append(arrivals, arrival{d, at})
			mu.Unlock()
			return nil
		}, bus.WithGroup("g"), bus.WithKeyOrdering())
		require.NoError(t, err)

		base := time.Now().Add(500 * time.Millisecond)
		msgs := make([]*bus.Message, n)
		byID := map[string]*bus.Message{}
		for i := range msgs {
			msgs[i] = &bus.Message{
				ID:        fmt.Sprintf("m%03d", i),
				Key:       fmt.Sprintf("k%d", i%keys),
				Headers:   map[string]string{"n": fmt.Sprint(i), "spaced": " value "},
				Payload:   fmt.Appendf(nil, "payload %d\x00\xff", i),
				DeliverAt: base.Add(time.Duration(i%slots) * 150 * time.Millisecond),
			}
			byID[msgs[i].ID] = msgs[i]
		}
		require.NoError(t, b.Publish(ctx, "timers", msgs...))
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(arrivals) >= n
		}, 30*time.Second, 10*time.Millisecond, "every delayed message arrives")

		require.Eventually(t, func() bool {
			ts, err := b.Topics(ctx)
			return err == nil && len(ts) == 1 && ts[0].Scheduled == 0 && ts[0].Messages == n
		}, 10*time.Second, 20*time.Millisecond, "the promoted schedules are removed, their copies stay")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, arrivals, n, "each arrives once")
		late := make([]time.Duration, 0, n)
		order := map[string][]int{} // key and due slot -> indexes in arrival order
		for _, a := range arrivals {
			m := byID[a.d.ID]
			require.NotNil(t, m, "unknown message %q", a.d.ID)
			due := m.DeliverAt.Truncate(time.Millisecond)
			assert.False(t, a.at.Before(due), "%s handled %v before its DeliverAt", m.ID, due.Sub(a.at))
			assert.Equal(t, m.Key, a.d.Key, "the key survives the schedule")
			assert.Equal(t, m.Headers, a.d.Headers, "the headers survive the schedule")
			assert.Equal(t, m.Payload, a.d.Payload, "the payload survives the schedule")
			assert.Equal(t, 1, a.d.Attempt, "%s: a promoted message is a first delivery", m.ID)
			late = append(late, a.at.Sub(due))
			var i int
			_, _ = fmt.Sscanf(m.ID, "m%d", &i)
			slot := fmt.Sprintf("%s@%d", m.Key, i%slots)
			order[slot] = append(order[slot], i)
		}
		for slot, is := range order {
			assert.True(t, slices.IsSorted(is), "%s: the messages of a key due together arrive in publish order: %v", slot, is)
		}
		slices.Sort(late)
		t.Logf("lateness of %d delayed messages: p50 %v, p90 %v, p99 %v, max %v", n,
			late[n/2], late[n*9/10], late[n*99/100], late[n-1])
	})
}

// On a 3-node cluster one member of a topic promotes; when its process
// dies (its connection drops without a word) another member takes over
// within the lock's lifetime, and what was due meanwhile arrives, once.
func TestPromotionFailsOverWhenItsMemberDies(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster")
	}
	c := natstest.StartCluster(t, 3)
	o := isolated(t, c.URL(), busnats.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "jobs"
	var mu sync.Mutex
	seen := map[string]int{}
	handler := func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		seen[d.ID]++
		mu.Unlock()
		assert.False(t, time.Now().Before(d.DeliverAt), "%s handled before its DeliverAt", d.ID)
		return nil
	}
	bes := make([]*busnats.Backend, 3)
	buses := make([]*bus.Bus, 3)
	for i := range bes {
		bes[i] = connect(t, c.Servers[i].URL(), o)
		buses[i] = bus.New(bes[i])
		_, err := buses[i].Subscribe(ctx, topic, handler, bus.WithGroup("g"))
		require.NoError(t, err, "member %d subscribes", i)
	}
	defer func() {
		for _, b := range buses {
			_ = b.Close(ctx) // the dead member's fails
		}
	}()
	leaders := func(alive []int) []int {
		var out []int
		for _, i := range alive {
			if busnats.PromoterLeads(bes[i], topic) {
				out = append(out, i)
			}
		}
		return out
	}
	var leader int
	require.Eventually(t, func() bool {
		l := leaders([]int{0, 1, 2})
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	}, 20*time.Second, 20*time.Millisecond, "one member promotes")

	publish := func(b *bus.Bus, prefix string) []string {
		var ids []string
		var msgs []*bus.Message
		for i := range 20 {
			m := &bus.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte("x"), DeliverAt: time.Now().Add(300 * time.Millisecond)}
			msgs = append(msgs, m)
			ids = append(ids, m.ID)
		}
		require.NoError(t, b.Publish(ctx, topic, msgs...))
		return ids
	}
	arrived := func(ids []string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	}
	first := publish(buses[leader], "before")
	require.Eventually(t, func() bool { return arrived(first) }, 20*time.Second, 10*time.Millisecond, "promoted by the first leader")

	var alive []int
	for i := range bes {
		if i != leader {
			alive = append(alive, i)
		}
	}
	bes[leader].Conn().Close() // the leader's process dies
	second := publish(buses[alive[0]], "after")
	require.Eventually(t, func() bool { return arrived(second) }, 30*time.Second, 10*time.Millisecond, "promoted by the next leader")
	assert.Len(t, leaders(alive), 1, "one surviving member promotes")
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		assert.Equal(t, 1, n, "%s arrived %d times", id, n)
	}
}

// Deleting a topic of a shared stream deletes its schedules too.
func TestDeleteTopicDeletesItsSchedules(t *testing.T) {
	url := natstest.Start(t).URL()
	be := connect(t, url, isolated(t, url, busnats.Options{StreamMode: busnats.StreamShared}))
	defer be.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	at := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	for _, topic := range []string{"doomed", "kept"} {
		require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m", Payload: []byte("x"), Headers: map[string]string{backend.HeaderDeliverAt: at}}}))
	}
	require.NoError(t, be.DeleteTopic(ctx, "doomed"))
	ts, err := be.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 1, "only the kept topic is left: %+v", ts)
	assert.Equal(t, "kept", ts[0].Name)
	assert.EqualValues(t, 1, ts[0].Scheduled, "the other topic's schedule stays")
}

// A DeliverAt further ahead than the streams' max age is refused before
// any I/O: the stream would drop the message before it is due.
func TestDeliverAtBeyondMaxAgeIsRefused(t *testing.T) {
	url := natstest.Start(t).URL()
	b := bus.New(connect(t, url, isolated(t, url, busnats.Options{MaxAge: time.Hour})))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() { require.NoError(t, b.Close(ctx)) }()
	err := b.Publish(ctx, "reminders",
		&bus.Message{Payload: []byte("soon"), DeliverAt: time.Now().Add(time.Minute)},
		&bus.Message{Payload: []byte("too late"), DeliverAt: time.Now().Add(2 * time.Hour)})
	require.ErrorIs(t, err, bus.ErrInvalidMessage)
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	assert.Empty(t, ts, "nothing was published, not even the stream")
}

// Many schedules due over a second, published in batches while earlier
// ones are promoted: every one is promoted once (the topic ends up with
// one copy of each and no schedule left) and arrives.
func TestEveryScheduleIsPromotedOnceUnderLoad(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		const n, batch = 3000, 50
		b := bus.New(connect(t, url, isolated(t, url, busnats.Options{})))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		defer func() { require.NoError(t, b.Close(ctx)) }()
		var mu sync.Mutex
		seen := map[string]int{}
		_, err := b.Subscribe(ctx, "load", func(_ context.Context, d *bus.Delivery) error {
			mu.Lock()
			seen[d.ID]++
			mu.Unlock()
			return nil
		}, bus.WithGroup("g"), bus.WithAckTimeout(5*time.Second))
		require.NoError(t, err)
		start := time.Now()
		for i := 0; i < n; i += batch {
			msgs := make([]*bus.Message, batch)
			for j := range msgs {
				msgs[j] = &bus.Message{ID: fmt.Sprintf("m%05d", i+j), Payload: []byte("x"),
					DeliverAt: start.Add(200*time.Millisecond + time.Duration(i+j)*time.Second/n)}
			}
			require.NoError(t, b.Publish(ctx, "load", msgs...))
		}
		var last backend.TopicInfo
		var lastErr error
		assert.Eventually(t, func() bool {
			got, err := b.Topics(ctx)
			if lastErr = err; err != nil || len(got) != 1 {
				return false
			}
			last = got[0]
			return got[0].Scheduled == 0 && got[0].Messages >= n
		}, 30*time.Second, 50*time.Millisecond, "every schedule is promoted")
		require.NoError(t, lastErr, "list the topics")
		mu.Lock()
		arrived := len(seen)
		mu.Unlock()
		require.EqualValues(t, 0, last.Scheduled, "no schedule is left (%d of %d arrived)", arrived, n)
		require.EqualValues(t, n, last.Messages, "one copy of each schedule")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == n
		}, 30*time.Second, 20*time.Millisecond, "every message arrives")
	})
}
