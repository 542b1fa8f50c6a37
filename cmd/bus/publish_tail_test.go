package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// testCtx bounds a test's calls that wait for deliveries.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openMem(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), "mem://")
	require.NoError(t, err, "open mem://")
	t.Cleanup(func() { assert.NoError(t, b.Close(context.Background()), "close bus") })
	return b
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPublishThenTailRoundTripsArguments(t *testing.T) {
	b := openMem(t)
	ctx := testCtx(t)
	var ids bytes.Buffer
	opts := publishOptions{topic: "cli.roundtrip", key: "k1", headers: map[string]string{"source": "cli", "trace": "x y"}}
	n, err := publishAll(ctx, b, opts, []string{"hello", "wörld\x00\x01"}, nil, &ids)
	require.NoError(t, err, "publish")
	require.Equal(t, 2, n, "two messages published")
	idLines := strings.Fields(ids.String())
	require.Len(t, idLines, 2, "one ID printed per message")

	var out bytes.Buffer
	err = tail(ctx, b, tailOptions{topic: "cli.roundtrip", group: "g", from: bus.StartOldest, ackMode: bus.AckOnSuccess, maxInFlight: 1, count: 2}, &out)
	require.NoError(t, err, "tail")
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 2, "one line per delivery: %q", out.String())
	assert.Contains(t, lines[0], "id="+idLines[0], "first line is the first message")
	assert.Contains(t, lines[0], "attempt=1")
	assert.Contains(t, lines[0], `key="k1"`)
	assert.Contains(t, lines[0], `headers={source="cli", trace="x y"}`, "headers sorted and quoted")
	assert.Contains(t, lines[0], `payload="hello"`)
	assert.Contains(t, lines[1], "id="+idLines[1], "second line is the second message")
	assert.Contains(t, lines[1], `payload="wörld\x00\x01"`, "binary bytes are escaped")
}

func TestTailAcksSoTheGroupDoesNotSeeMessagesAgain(t *testing.T) {
	b := openMem(t)
	ctx := testCtx(t)
	_, err := publishAll(ctx, b, publishOptions{topic: "cli.acked"}, []string{"one", "two", "three"}, nil, &bytes.Buffer{})
	require.NoError(t, err, "publish")

	opts := tailOptions{topic: "cli.acked", group: "g", from: bus.StartOldest, ackMode: bus.AckManual, maxInFlight: 1, count: 2}
	var first bytes.Buffer
	require.NoError(t, tail(ctx, b, opts, &first), "first tail")
	assert.Equal(t, 2, strings.Count(first.String(), "\n"), "first tail prints two")

	opts.count = 1
	var second bytes.Buffer
	require.NoError(t, tail(ctx, b, opts, &second), "second tail")
	assert.Contains(t, second.String(), `payload="three"`, "the group resumes after the acked messages")
	assert.NotContains(t, second.String(), `payload="one"`, "acked messages are not delivered again")
	assert.NotContains(t, second.String(), `payload="two"`, "acked messages are not delivered again")
	assert.Contains(t, second.String(), "attempt=1", "--count took no message past the two it printed")
}

func TestPublishReadsStdinLines(t *testing.T) {
	b := openMem(t)
	ctx := testCtx(t)
	var ids bytes.Buffer
	n, err := publishAll(ctx, b, publishOptions{topic: "cli.stdin"}, nil, strings.NewReader("alpha\nbeta\n\ngamma"), &ids)
	require.NoError(t, err, "publish")
	assert.Equal(t, 4, n, "one message per line, the empty line included")

	var out bytes.Buffer
	require.NoError(t, tail(ctx, b, tailOptions{topic: "cli.stdin", group: "g", from: bus.StartOldest, maxInFlight: 1, count: 4}, &out), "tail")
	for _, p := range []string{`payload="alpha"`, `payload="beta"`, `payload=""`, `payload="gamma"`} {
		assert.Contains(t, out.String(), p, "tail prints %s", p)
	}
}

func TestTailStopsWhenContextEnds(t *testing.T) {
	b := openMem(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- tail(ctx, b, tailOptions{topic: "cli.live", group: "g", from: bus.StartOldest, maxInFlight: 1}, out)
	}()
	_, err := publishAll(context.Background(), b, publishOptions{topic: "cli.live"}, []string{"ping"}, nil, &bytes.Buffer{})
	require.NoError(t, err, "publish")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `payload="ping"`) }, 10*time.Second, 5*time.Millisecond, "tail prints the message")
	cancel()
	select {
	case err := <-errc:
		assert.NoError(t, err, "an interrupted tail closes cleanly")
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not return after its ctx ended")
	}
}

func TestPublishAndTailCommandsValidateFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "publish without topic", args: []string{"publish", "x"}, want: "--topic is required"},
		{name: "publish bad header", args: []string{"publish", "--topic", "t", "--header", "novalue", "x"}, want: "want key=value"},
		{name: "tail without topic", args: []string{"tail"}, want: "--topic is required"},
		{name: "groups without topic", args: []string{"groups"}, want: "bus groups: --topic is required, for example: bus groups --url redis://127.0.0.1:6379 --topic orders\n"},
		{name: "groups with an argument", args: []string{"groups", "--topic", "t", "orders"}, want: `unexpected arguments ["orders"]`},
		{name: "tail bad from", args: []string{"tail", "--topic", "t", "--from", "middle"}, want: "want oldest or newest"},
		{name: "tail bad ack mode", args: []string{"tail", "--topic", "t", "--ack-mode", "never"}, want: "--ack-mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", tt.args...)
			assert.Equal(t, exitUsage, code, "usage error")
			assert.Contains(t, stderr, tt.want)
		})
	}
}

func TestPublishCommandRejectsInvalidTopic(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "publish", "--url", "mem://", "--topic", "bad topic", "x")
	assert.Equal(t, exitFailure, code, "invalid topic fails")
	assert.Empty(t, stdout, "nothing published")
	assert.Contains(t, stderr, "invalid topic")
}

func TestPublishCommandPrintsIDs(t *testing.T) {
	code, stdout, stderr := runCLI(t, "a\nb\n", "publish", "--url", "mem://", "--topic", "cli.cmd", "--key", "k", "--header", "h=v")
	require.Equal(t, exitOK, code, "publish succeeds: %s", stderr)
	ids := strings.Fields(stdout)
	require.Len(t, ids, 2, "one ID per stdin line")
	assert.NotEqual(t, ids[0], ids[1], "IDs are unique")
}

func TestCountLimiterNeverGrantsMoreThanCount(t *testing.T) {
	l := newCountLimiter(5)
	ctx := testCtx(t)
	n, err := l.Acquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 3, n, "takes what is asked while under the count")
	n, err = l.Acquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "never more than the count in all")
	l.Release(1) // one unit came back unused
	n, err = l.Acquire(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "unused units can be taken again")
	for range 5 {
		l.printed()
		l.Release(1)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(short, 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "after count deliveries nothing more is granted")
}

func TestFormatDelivery(t *testing.T) {
	published := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	tests := []struct {
		name string
		d    *bus.Delivery
		want string
	}{
		{
			name: "plain",
			d:    &bus.Delivery{Message: bus.Message{ID: "id1", Payload: []byte("hi")}, Attempt: 1},
			want: "id=id1 attempt=1 payload=\"hi\"\n",
		},
		{
			name: "everything",
			d: &bus.Delivery{
				Message:     bus.Message{ID: "id2", Key: "k", Headers: map[string]string{"b": "2", "a": "1\t"}, Payload: []byte{0, 'x', 0xff, '\n'}},
				Attempt:     3,
				PublishedAt: published,
			},
			want: "id=id2 attempt=3 published=2026-01-02T03:04:05.000000006Z key=\"k\" headers={a=\"1\\t\", b=\"2\"} payload=\"\\x00x\\xff\\n\"\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatDelivery(tt.d))
		})
	}
}

func TestPublishAndTailCommandsRoundTripOnANamedBroker(t *testing.T) {
	url := fmt.Sprintf("mem://cli-roundtrip-%d", time.Now().UnixNano())
	// A named broker lives while some bus has it open; keep it across the
	// two commands, as two processes would share a real broker.
	keep, err := bus.Open(context.Background(), url)
	require.NoError(t, err, "open named broker")
	defer func() { assert.NoError(t, keep.Close(context.Background()), "close") }()

	code, ids, stderr := runCLI(t, "", "publish", "--url", url, "--topic", "cli.named", "--header", "k=v", "first", "second")
	require.Equal(t, exitOK, code, "publish: %s", stderr)
	require.Len(t, strings.Fields(ids), 2, "two IDs printed")

	code, out, stderr := runCLI(t, "", "tail", "--url", url, "--topic", "cli.named", "--group", "g", "--from", "oldest", "--count", "2")
	require.Equal(t, exitOK, code, "tail: %s", stderr)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, "tail prints both: %q", out)
	assert.Contains(t, lines[0], `headers={k="v"} payload="first"`)
	assert.Contains(t, lines[1], `payload="second"`)
	assert.Contains(t, lines[0], "id="+strings.Fields(ids)[0], "tail shows the ID publish printed")
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTailReturnsTheWriteErrorAndLeavesTheMessageWithTheGroup(t *testing.T) {
	b := openMem(t)
	ctx := testCtx(t)
	_, err := publishAll(ctx, b, publishOptions{topic: "cli.werr"}, []string{"kept"}, nil, &bytes.Buffer{})
	require.NoError(t, err, "publish")

	opts := tailOptions{topic: "cli.werr", group: "g", from: bus.StartOldest, ackMode: bus.AckManual, maxInFlight: 1, count: 1}
	err = tail(ctx, b, opts, failingWriter{})
	require.Error(t, err, "a failed write ends tail with an error")
	assert.Contains(t, err.Error(), "disk full")

	var out bytes.Buffer
	require.NoError(t, tail(ctx, b, opts, &out), "second tail")
	assert.Contains(t, out.String(), `payload="kept"`, "the message that could not be printed is still there")
	assert.Contains(t, out.String(), "attempt=2", "it comes back as a redelivery")
}
