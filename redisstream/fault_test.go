package redisstream_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// publishN publishes n messages with IDs prefix-0 ... in batches of 50
// and records them in the ledger.
func publishN(t *testing.T, b *bus.Bus, topic, prefix string, n int, l *ledger) {
	t.Helper()
	for start := 0; start < n; start += 50 {
		batch := make([]*bus.Message, 0, 50)
		for i := start; i < min(start+50, n); i++ {
			batch = append(batch, &bus.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte("payload")})
		}
		require.NoError(t, b.Publish(context.Background(), topic, batch...))
		for _, m := range batch {
			l.publish(m.ID)
		}
	}
}

func TestFaultConsumerKilledMidHandlerWorkFinishedByAnotherMember(t *testing.T) {
	srv := redistest.Start(t)
	b, _, client := openBus(t, srv.URL(), nil)
	topic := uniqueTopic(t)
	const n, stuckAfter = 300, 120
	l := newLedger()
	publishN(t, b, topic, "m", n, l)

	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"=1", childURLEnv+"="+srv.URL(), childTopicEnv+"="+topic,
		childGroupEnv+"=g", fmt.Sprintf("%s=%d", childStuckEnv, stuckAfter))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	stuck := make(chan struct{})
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "GOT":
				l.deliver(f[1])
				l.ack(f[1]) // the handler succeeded; its ack may not have been flushed
			case len(f) == 2 && f[0] == "STUCK":
				l.deliver(f[1])
				once.Do(func() { close(stuck) })
			}
		}
	}()
	select {
	case <-stuck:
	case <-time.After(30 * time.Second):
		t.Fatal("the child consumer never got stuck mid-handler")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL), "SIGKILL the child mid-handler")
	_ = cmd.Wait()
	killed = true
	<-lines

	var redelivered atomic.Int64
	_, err = b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		l.deliver(d.ID)
		if d.Attempt > 1 {
			redelivered.Add(1)
		}
		l.ack(d.ID)
		return nil
	}, bus.WithGroup("g"), bus.WithAckTimeout(childAckTimeout))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.missing() == 0 }, 30*time.Second, 10*time.Millisecond,
		"the surviving member finishes every message after the ack timeout")
	require.Eventually(t, func() bool {
		p, err := client.XPending(context.Background(), "bus:{"+topic+"}", "g").Result()
		return err == nil && p.Count == 0
	}, 10*time.Second, 10*time.Millisecond, "nothing stays pending in the group")
	assert.Positive(t, redelivered.Load(), "the killed consumer's in-flight messages come back with Attempt > 1")
	assert.Zero(t, l.report(t), "lost")
}

func TestFaultNonPersistentRedisRestartRecoversFromNoGroup(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	b, be, _ := openBus(t, srv.URL(), nil, bus.WithObserver(rec))
	topic := uniqueTopic(t)
	l := newLedger()
	_, err := b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		l.deliver(d.ID)
		l.ack(d.ID)
		return nil
	}, bus.WithGroup("g"), bus.WithAckTimeout(time.Second))
	require.NoError(t, err)

	publishN(t, b, topic, "before", 100, l)
	require.Eventually(t, func() bool { return l.missing() == 0 }, 20*time.Second, 10*time.Millisecond)

	srv.Restart() // kill and start empty: the stream and its group are gone
	// Publishing after the restart; the application retries failed publishes.
	for i := range 100 {
		id := fmt.Sprintf("after-%d", i)
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return b.Publish(ctx, topic, &bus.Message{ID: id, Payload: []byte("payload")}) == nil
		}, 20*time.Second, 10*time.Millisecond, "publish after restart")
		l.publish(id)
	}
	require.Eventually(t, func() bool { return l.missing() == 0 }, 20*time.Second, 10*time.Millisecond,
		"the consumer recovers from NOGROUP and gets every message published after the restart")
	recreated := rec.count(observer.ScopeReclaim, "was missing")
	t.Logf("group re-creations reported: %d; receive errors: %d", recreated, rec.count(observer.ScopeReceive, ""))
	assert.GreaterOrEqual(t, recreated, 1, "the loss is reported through the observer")
	assert.LessOrEqual(t, recreated, 2, "no hot loop of re-creations")
	assert.EqualValues(t, recreated, be.Stats().GroupsRecreated)
	assert.Zero(t, l.report(t), "lost")
}
