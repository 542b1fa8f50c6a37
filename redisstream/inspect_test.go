package redisstream_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

// A member counts as soon as it subscribed, not from its first delivery:
// on Redis 7.0 a read that finds nothing does not create the consumer.
func TestGroupsCountAMemberThatReceivedNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, redistest.URL(t), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	for i := 1; i <= 2; i++ {
		_, err = b.Subscribe(ctx, "idle", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
		require.NoError(t, err)
		gs, err := b.Groups(ctx, "idle")
		require.NoError(t, err)
		require.Len(t, gs, 1)
		assert.EqualValues(t, i, gs[0].Consumers, "%d idle member(s) count at once", i)
	}
}

// DeleteTopic removes every key the topic owns, its groups' lock keys
// included (the last holder's has no ttl): of a group whose lock is
// held, of one unlocked, of one that locked but has no group on the
// stream, and the last holder of a group on the stream that no registry
// lists (written before the registry existed). It names them: no SCAN
// reaches the server. Other topics' keys are left alone.
func TestDeleteTopicRemovesEveryKeyOfTheTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	sent := &commandNames{}
	client.AddHook(sent)
	be, err := redisstream.New(client, &redisstream.Options{Prefix: "deltest"})
	require.NoError(t, err)
	defer be.Close()
	for _, topic := range []string{"doomed", "kept"} {
		require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m-" + topic, Payload: []byte("x")}}))
		for _, group := range []string{"g", "unlocked", "nogroup"} {
			held, _, err := be.LockGroup(ctx, topic, group, "holder-1", time.Minute)
			require.NoError(t, err)
			require.True(t, held, "the lock of %s is taken", group)
		}
		require.NoError(t, be.UnlockGroup(ctx, topic, "unlocked", "holder-1"))
		for _, group := range []string{"g", "unlocked", "old"} {
			require.NoError(t, admin.XGroupCreate(ctx, "deltest:{"+topic+"}", group, "0").Err())
		}
		require.NoError(t, admin.Set(ctx, "deltest:{"+topic+"}#lockby:old", "holder-0", 0).Err())
		// A delayed nack's hold and its index entry.
		require.NoError(t, admin.ZAdd(ctx, "deltest:{"+topic+"}#hold", redis.Z{Score: 1, Member: "g\x001-0\x001000\x001"}).Err())
		require.NoError(t, admin.HSet(ctx, "deltest:{"+topic+"}#held", "g\x001-0", "1000\x001\x00c").Err())
	}
	keysOf := func(topic string) []string {
		keys, err := admin.Keys(ctx, "deltest:{"+topic+"}*").Result()
		require.NoError(t, err)
		return keys
	}
	before := keysOf("kept")
	require.Subset(t, keysOf("doomed"), []string{
		"deltest:{doomed}", "deltest:{doomed}#locks", "deltest:{doomed}#lock:g", "deltest:{doomed}#lockby:g",
		"deltest:{doomed}#lock:nogroup", "deltest:{doomed}#lockby:nogroup", "deltest:{doomed}#lockby:old",
		"deltest:{doomed}#hold", "deltest:{doomed}#held",
	})
	scans := commandCalls(t, admin, "scan")
	sent.reset()
	require.NoError(t, be.DeleteTopic(ctx, "doomed"))
	assert.Empty(t, keysOf("doomed"), "no key of the deleted topic is left")
	assert.ElementsMatch(t, before, keysOf("kept"), "the other topic keeps its keys")
	assert.NotContains(t, sent.names(), "scan", "DeleteTopic sends no SCAN")
	assert.NotContains(t, sent.names(), "keys", "DeleteTopic sends no KEYS")
	assert.Equal(t, scans, commandCalls(t, admin, "scan"), "the server ran no SCAN")
}

// commandNames is a go-redis hook that records the names of the commands
// a client sends, pipelined ones too.
type commandNames struct {
	mu  sync.Mutex
	cmd []string
}

func (h *commandNames) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.cmd = append(h.cmd, c.Name())
	}
}

func (h *commandNames) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmd = nil
}

func (h *commandNames) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cmd)
}

func (h *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}
