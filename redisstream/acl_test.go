package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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

// aclCommands is the least-privilege command set of the backend, as the
// README lists it.
var aclCommands = []string{
	"+xadd", "+xreadgroup", "+xack", "+xautoclaim", "+xpending", "+xclaim",
	"+xgroup|create", "+xgroup|createconsumer", "+xgroup|delconsumer", "+xinfo|groups", "+xtrim",
	"+zadd", "+zrange", "+zrangebyscore", "+zrem", "+zscore", "+hget", "+hset", "+hdel", "+xrange", "+xdel", "+set", "+get",
	"+evalsha", "+eval", "+time", "+del", "+pexpire",
	"+client|id", "+client|unblock", "+client|kill",
	"+ping",
}

// aclUser creates user on the server with the given commands on keys
// "<prefix>:*" only, and returns a client logged in as that user.
func aclUser(t *testing.T, srv *redistest.Server, admin *redis.Client, user, prefix string, commands []string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw-" + user, "~" + prefix + ":*", "resetchannels", "-@all"}
	for _, c := range commands {
		args = append(args, c)
	}
	require.NoError(t, admin.Do(context.Background(), args...).Err(), "create ACL user %s", user)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw-" + user, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// commandCalls returns the calls of a command from INFO commandstats.
func commandCalls(t *testing.T, admin *redis.Client, cmd string) string {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			return calls
		}
	}
	return "0"
}

func TestLeastPrivilegeACLSufficesAndConfinesWritesToThePrefix(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	client := aclUser(t, srv, admin, "bususer", "acl", aclCommands)

	rec := &recorder{}
	be, err := redisstream.New(client, &redisstream.Options{Prefix: "acl", TrimInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	b := bus.New(be, bus.WithObserver(rec))
	closed := false
	t.Cleanup(func() {
		if !closed {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Close(cctx)
		}
	})

	topic := uniqueTopic(t)
	var (
		mu       sync.Mutex
		settled  = map[string]string{}
		nackedAt time.Time
		snoozes  atomic.Int32
	)
	done := make(chan struct{})
	settle := func(id, how string) {
		mu.Lock()
		defer mu.Unlock()
		settled[id] = how
		if len(settled) == 6 {
			close(done)
		}
	}
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		var err error
		switch {
		case d.ID == "ack":
			err = d.Ack(ctx)
		case d.ID == "extend":
			if err = d.Extend(ctx); err == nil {
				err = d.Ack(ctx)
			}
		case d.ID == "nack" && d.Attempt == 1:
			mu.Lock()
			nackedAt = time.Now()
			mu.Unlock()
			// Longer than the ack timeout: held in the hold ZSET.
			return d.Nack(ctx, 2500*time.Millisecond)
		case d.ID == "nack":
			err = d.Ack(ctx)
		case d.ID == "snooze" && snoozes.Add(1) == 1:
			return d.Snooze(ctx, 10*time.Millisecond)
		case d.ID == "snooze" || d.ID == "later":
			err = d.Ack(ctx)
		case d.ID == "dead":
			if err = d.Reject(ctx, errors.New("refused by the handler")); err == nil {
				settle(d.ID, "dead-lettered")
			}
			return err
		}
		if err == nil {
			settle(d.ID, "acked")
		}
		return err
	}, bus.WithGroup("g"), bus.WithAckMode(bus.AckManual),
		// A lease a loaded machine does not let lapse: a lapse cancels
		// a handler mid-settlement, and the case would wait for it.
		bus.WithAckTimeout(2*time.Second),
		bus.WithDeadLetter(topic+".dlq"), bus.WithStartFrom(backend.StartOldest))
	require.NoError(t, err, "Subscribe with the least-privilege user")
	for _, id := range []string{"ack", "extend", "nack", "dead", "snooze"} {
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: id, Payload: []byte(id)}), "Publish %s with the least-privilege user", id)
	}
	later := &bus.Message{ID: "later", Payload: []byte("later"), DeliverAt: time.Now().Add(100 * time.Millisecond)}
	require.NoError(t, b.Publish(ctx, topic, later), "Publish with DeliverAt (the schedule) with the least-privilege user")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("not every message was settled: %v; events: %v", settled, rec.events)
	}
	mu.Lock()
	assert.Equal(t, map[string]string{"ack": "acked", "extend": "acked", "nack": "acked", "dead": "dead-lettered", "later": "acked", "snooze": "acked"}, settled)
	assert.False(t, nackedAt.IsZero(), "the delayed nack ran")
	mu.Unlock()
	require.Eventually(t, func() bool { return commandCalls(t, admin, "xtrim") != "0" }, 10*time.Second, 10*time.Millisecond,
		"the trimmer runs with the least-privilege user")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(cctx), "Close with the least-privilege user")
	require.NoError(t, b.Close(cctx))
	closed = true

	dlq, err := admin.XLen(ctx, "acl:{"+topic+"}.dlq").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, dlq, "the rejected message is in the dead-letter stream")
	pending, err := admin.XPending(ctx, "acl:{"+topic+"}", "g").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count, "nothing stays pending")
	consumers, err := admin.XInfoConsumers(ctx, "acl:{"+topic+"}", "g").Result()
	require.NoError(t, err)
	assert.Empty(t, consumers, "Close removed its consumer from the group")
	denied, err := admin.Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	assert.Empty(t, denied, "the server denied nothing the backend asked for")
	assert.Zero(t, rec.count(observer.ScopeReclaim, "")+rec.count(observer.ScopeNack, "")+rec.count(observer.ScopeAck, ""),
		"no background error was reported")

	// Writes outside the prefix are denied.
	err = client.XAdd(ctx, &redis.XAddArgs{Stream: "other:{" + topic + "}", Values: []any{"f", "v"}}).Err()
	require.Error(t, err, "XADD outside the prefix is denied")
	assert.Contains(t, err.Error(), "NOPERM")
	err = client.Incr(ctx, "acl:plain").Err()
	require.Error(t, err, "commands outside the set are denied, inside the prefix too")
	other, err := redisstream.New(client, &redisstream.Options{Prefix: "other"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	err = other.Publish(ctx, topic, []*backend.Message{{ID: "x", Payload: []byte("x"), PublishedAt: time.Now()}})
	require.Error(t, err, "a backend with another prefix cannot publish")
}

func TestReceiveDeniedByACLIsPermanent(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	var cmds []string
	for _, c := range aclCommands {
		if c != "+xreadgroup" {
			cmds = append(cmds, c)
		}
	}
	client := aclUser(t, srv, admin, "noread", "acl", cmds)
	be, err := redisstream.New(client, &redisstream.Options{Prefix: "acl"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	s, err := be.Subscribe(context.Background(), uniqueTopic(t), backend.SubscribeConfig{
		Group: "g", AckTimeout: time.Second, MaxInFlight: 1, MaxDeliveries: 3, Observer: observer.Nop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Receive(context.Background(), 1)
	require.Error(t, err, "XREADGROUP is denied")
	assert.True(t, backend.IsPermanent(err), "a denied read is permanent: %v", err)

	// A transient failure is not.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Receive(ctx, 1)
	require.Error(t, err)
	assert.False(t, backend.IsPermanent(err), "a cancelled receive is not permanent")
}

func TestReceiveOnAKeyOfAnotherTypeIsPermanent(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	be, err := redisstream.New(client, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	topic := uniqueTopic(t)
	s, err := be.Subscribe(context.Background(), topic, backend.SubscribeConfig{
		Group: "g", AckTimeout: time.Minute, MaxInFlight: 1, MaxDeliveries: 3, Observer: observer.Nop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	// Someone replaces the stream with a string.
	require.NoError(t, client.Del(context.Background(), "bus:{"+topic+"}").Err())
	require.NoError(t, client.Set(context.Background(), "bus:{"+topic+"}", "v", 0).Err())
	_, err = s.Receive(context.Background(), 1)
	require.Error(t, err, "XREADGROUP on a string fails")
	assert.Contains(t, err.Error(), "WRONGTYPE")
	assert.True(t, backend.IsPermanent(err), "WRONGTYPE is permanent: %v", err)
}
