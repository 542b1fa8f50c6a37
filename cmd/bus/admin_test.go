package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// seedDeadLetters opens url, makes "orders" reject its first deliveries so
// that ids end on "orders.dlq", and returns the bus and a switch that makes
// the handler succeed (and report replayed IDs) from then on.
func seedDeadLetters(t *testing.T, url, topic string, ids ...string) (*bus.Bus, *atomic.Bool, <-chan *bus.Delivery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	var ok atomic.Bool
	got := make(chan *bus.Delivery, len(ids))
	_, err = b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		if !ok.Load() {
			return bus.Reject(errors.New("bad order"))
		}
		got <- d
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)
	for _, id := range ids {
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: id, Key: "k-" + id, Payload: []byte("p-" + id)}))
	}
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, topic+".dlq", 0)
		return err == nil && len(dls) == len(ids)
	}, 20*time.Second, 10*time.Millisecond, "the messages reach the dead-letter topic")
	return b, &ok, got
}

func testDLQCommands(t *testing.T, url string) {
	topic := "orders" + strings.ReplaceAll(msgid.New(), "-", "")[:12]
	_, ok, got := seedDeadLetters(t, url, topic, "o-1", "o-2", "o-3")

	code, stdout, stderr := runCLI(t, "", "dlq", "list", "--url", url, "--of", topic, "--json")
	require.Equal(t, exitOK, code, stderr)
	var listed []deadLetterJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed), stdout)
	require.Len(t, listed, 3)
	for _, d := range listed {
		assert.Equal(t, "rejected", d.Code, "%s: reason code", d.ID)
		assert.Equal(t, topic, d.Topic)
		assert.Equal(t, "billing", d.Group)
		assert.Contains(t, d.Reason, "bad order")
		assert.Equal(t, "p-"+d.ID, d.Payload)
		assert.Equal(t, "text", d.Encoding)
	}

	code, stdout, stderr = runCLI(t, "", "dlq", "list", "--url", url, "--topic", topic+".dlq")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "o-2", "the table lists the IDs")
	assert.Contains(t, stdout, "rejected")

	code, stdout, stderr = runCLI(t, "", "dlq", "show", "--url", url, "--of", topic, "o-3")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "p-o-3", "show prints the payload")
	assert.Contains(t, stdout, "bad order", "and the reason")
	code, _, stderr = runCLI(t, "", "dlq", "show", "--url", url, "--of", topic, "typo")
	assert.Equal(t, exitFailure, code, "an unknown ID is an error")
	assert.Contains(t, stderr, "typo")
	code, _, stderr = runCLI(t, "", "dlq", "purge", "--url", url, "--of", topic, "--id", "typo")
	assert.Equal(t, exitFailure, code, "purging an unknown ID is an error")
	assert.Contains(t, stderr, "not found: typo", "the error names the ID")

	ok.Store(true)
	code, stdout, stderr = runCLI(t, "", "dlq", "replay", "--url", url, "--of", topic, "--id", "o-2", "--json")
	require.Equal(t, exitOK, code, stderr)
	assert.JSONEq(t, `{"topic":"`+topic+`.dlq","replayed":1}`, stdout)
	select {
	case d := <-got:
		assert.Equal(t, "o-2", d.ID)
		assert.Equal(t, "k-o-2", d.Key)
		assert.Equal(t, 1, d.Attempt)
	case <-time.After(20 * time.Second):
		t.Fatal("the replayed message did not arrive on its topic")
	}

	code, stdout, stderr = runCLI(t, "", "dlq", "purge", "--url", url, "--topic", topic+".dlq", "--all")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "purged 2 dead letter(s)")
	code, stdout, _ = runCLI(t, "", "dlq", "list", "--url", url, "--of", topic, "--json")
	require.Equal(t, exitOK, code)
	assert.JSONEq(t, `[]`, stdout, "nothing left")

	code, stdout, stderr = runCLI(t, "", "topics", "--url", url, "--json")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, `"name": "`+topic+`"`)
	code, stdout, stderr = runCLI(t, "", "groups", "--url", url, "--topic", topic, "--json")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, `"name": "billing"`)
	code, stdout, stderr = runCLI(t, "", "stats", "--url", url)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, topic)
}

func TestDLQCommandsOnMem(t *testing.T) {
	testDLQCommands(t, "mem://admin-cli-test")
}

func TestDLQCommandsOnRedis(t *testing.T) {
	testDLQCommands(t, redistest.URL(t))
}

func TestDLQCommandsOnNATS(t *testing.T) {
	testDLQCommands(t, natstest.Start(t).URL())
}

func TestDLQWorksWithAnyDeadLetterTopic(t *testing.T) {
	const url = "mem://custom-dlq-test"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	defer b.Close(ctx)
	_, err = b.Subscribe(ctx, "pay", func(context.Context, *bus.Delivery) error {
		return bus.Reject(errors.New("declined"))
	}, bus.WithDeadLetter("pay-failures"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "pay", &bus.Message{ID: "p-1"}))
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, "pay-failures", 0)
		return err == nil && len(dls) == 1
	}, 10*time.Second, 5*time.Millisecond)
	code, stdout, stderr := runCLI(t, "", "dlq", "list", "--url", url, "--topic", "pay-failures")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "p-1", "the dead-letter topic WithDeadLetter named is listed as it is")
	code, stdout, stderr = runCLI(t, "", "topics", "--url", url, "--dead-letters")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "pay-failures", "topics --dead-letters lists it by its headers")
	assert.NotContains(t, stdout, "pay\t", "and not the source topic")
}

func TestTopicsDelete(t *testing.T) {
	ctx, url, b := openRedisBus(t)
	require.NoError(t, b.Publish(ctx, "doomed", &bus.Message{Payload: []byte("x")}))
	code, _, stderr := runCLI(t, "", "topics", "delete", "doomed", "--url", url)
	assert.Equal(t, exitUsage, code, "delete wants --yes")
	assert.Contains(t, stderr, "--yes")
	code, stdout, stderr := runCLI(t, "", "topics", "delete", "doomed", "--url", url, "--yes")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "deleted doomed")
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	for _, tp := range ts {
		assert.NotEqual(t, "doomed", tp.Name, "the topic is gone")
	}
	code, stdout, stderr = runCLI(t, "", "topics", "delete", "doomed", "--url", url, "--yes")
	assert.Equal(t, exitFailure, code, "a topic that is not there cannot be deleted")
	assert.Contains(t, stderr, "nothing to delete", "and the command says so")
	assert.NotContains(t, stdout, "deleted", "it does not claim a delete")
	code, _, stderr = runCLI(t, "", "topics", "delete", "x", "--url", "mem://delete-test", "--yes")
	assert.Equal(t, exitFailure, code, "mem cannot delete topics")
	assert.Contains(t, stderr, "unsupported", "and says so")
}

func TestGroupsResetMovesAGroup(t *testing.T) {
	ctx, url, _ := openRedisBus(t)
	// retention=all: what the group acked stays for the reset to read
	// again (the default trims it at the subscription's Close).
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	b, err := bus.Open(ctx, url+sep+"retention=all")
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(ctx) })
	got := make(chan string, 8)
	next := func() string {
		t.Helper()
		select {
		case id := <-got:
			return id
		case <-ctx.Done():
			t.Fatal("no delivery before the test's deadline")
			return ""
		}
	}
	sub, err := b.Subscribe(ctx, "resettable", func(_ context.Context, d *bus.Delivery) error {
		got <- d.ID
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "resettable", &bus.Message{ID: "r-1"}, &bus.Message{ID: "r-2"}))
	for range 2 {
		next()
	}
	require.NoError(t, sub.Close(ctx))
	code, stdout, stderr := runCLI(t, "", "groups", "reset", "--url", url, "--topic", "resettable", "--group", "g", "--to", "oldest")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "now reads from oldest")
	_, err = b.Subscribe(ctx, "resettable", func(_ context.Context, d *bus.Delivery) error {
		got <- d.ID
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	again := []string{next(), next()}
	assert.ElementsMatch(t, []string{"r-1", "r-2"}, again, "the group reads the acked messages again")
	code, _, stderr = runCLI(t, "", "groups", "reset", "--url", url, "--topic", "resettable", "--group", "nobody", "--to", "newest")
	assert.Equal(t, exitFailure, code, "an unknown group is an error")
	assert.Contains(t, stderr, "not found")
}

func TestDLQUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"no subcommand", []string{"dlq"}},
		{"no topic", []string{"dlq", "list"}},
		{"both --topic and --of", []string{"dlq", "list", "--topic", "t.dlq", "--of", "t"}},
		{"show without an ID", []string{"dlq", "show", "--of", "t"}},
		{"replay without selection", []string{"dlq", "replay", "--topic", "t"}},
		{"purge with both", []string{"dlq", "purge", "--topic", "t", "--all", "--id", "x"}},
		{"groups without topic", []string{"groups"}},
		{"reset without --to", []string{"groups", "reset", "--topic", "t", "--group", "g"}},
		{"reset to a bad time", []string{"groups", "reset", "--topic", "t", "--group", "g", "--to", "yesterday"}},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(t, "", tt.args...)
		assert.Equal(t, exitUsage, code, "%s: usage error (%s)", tt.name, stderr)
	}
}

func TestVersionListsBackends(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCLI(t, "", "version")
	require.Equal(t, exitOK, code)
	for _, s := range []string{"mem", "redis", "nats"} {
		assert.Contains(t, stdout, s, "the linked backends are listed")
	}
}

func TestPrivateMemWarns(t *testing.T) {
	code, _, stderr := runCLI(t, "", "publish", "--url", "mem://", "--topic", "t", "hello")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "outlives this command", "publishing into a private broker warns")
}

func TestTailJSON(t *testing.T) {
	d := &bus.Delivery{Message: bus.Message{ID: "m1", Key: "k", Headers: map[string]string{"h": "v"}, Payload: []byte{0xff, 0}}, Attempt: 2}
	var got deliveryJSON
	require.NoError(t, json.Unmarshal([]byte(formatDeliveryJSON(d)), &got))
	assert.Equal(t, "m1", got.ID)
	assert.Equal(t, 2, got.Attempt)
	assert.Equal(t, "base64", got.PayloadEncoding, "binary payloads are base64")
	assert.Equal(t, "/wA=", got.Payload)
	d.Payload = []byte("héllo")
	require.NoError(t, json.Unmarshal([]byte(formatDeliveryJSON(d)), &got))
	assert.Equal(t, "text", got.PayloadEncoding)
	assert.Equal(t, "héllo", got.Payload)
}

// bus topics shows how many messages wait for their DeliverAt, and when
// the first is due.
func TestTopicsShowScheduledMessages(t *testing.T) {
	ctx, url, b := openRedisBus(t)
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	require.NoError(t, b.Publish(ctx, "later", &bus.Message{Payload: []byte("x")},
		&bus.Message{Payload: []byte("y"), DeliverAt: due}, &bus.Message{Payload: []byte("z"), DeliverAt: due.Add(time.Minute)}))
	code, stdout, stderr := runCLI(t, "", "topics", "--url", url, "--json")
	require.Equal(t, exitOK, code, stderr)
	var ts []bus.TopicInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &ts))
	require.Len(t, ts, 1)
	assert.EqualValues(t, 1, ts[0].Messages, "one message is in the stream")
	assert.EqualValues(t, 2, ts[0].Scheduled, "two wait for their DeliverAt")
	assert.True(t, due.Equal(ts[0].NextDue), "next due %v, want %v", ts[0].NextDue, due)
	code, stdout, stderr = runCLI(t, "", "topics", "--url", url)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "SCHEDULED")
}

// openRedisBus opens a bus on a private Redis, closed at the end of the
// test, with a ctx that bounds the test.
func openRedisBus(t *testing.T) (context.Context, string, *bus.Bus) {
	t.Helper()
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(ctx) })
	return ctx, url, b
}
