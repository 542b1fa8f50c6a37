package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

// TestCLIOpensSQSURLs: bus publish opens an sqs URL; bus topics, bus
// groups and the dashboard's inspector show the topic and its group, with
// the figures SQS has no number for unknown.
func TestCLIOpensSQSURLs(t *testing.T) {
	awstest.SetDummyCredentials(t)
	srv := awstest.Start(t)
	url := srv.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	defer b.Close(context.Background())
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("billing"))
	require.NoError(t, err)
	defer sub.Close(context.Background())

	code, stdout, stderr := runCLI(t, "", "publish", "--url", url, "--topic", "orders", "hello")
	require.Equal(t, exitOK, code, "bus publish on sqs: %s", stderr)
	assert.NotEmpty(t, stdout, "it prints the message's ID")

	in, closeIn, err := openInspector(ctx, url)
	require.NoError(t, err, "the dashboard's inspector opens sqs")
	require.NotNil(t, in)
	closeIn()
	var ts []bus.TopicInfo
	require.Eventually(t, func() bool {
		code, stdout, _ := runCLI(t, "", "topics", "--url", url, "--json")
		return code == exitOK && json.Unmarshal([]byte(stdout), &ts) == nil &&
			slices.ContainsFunc(ts, func(ti bus.TopicInfo) bool { return ti.Name == "orders" })
	}, 30*time.Second, 200*time.Millisecond, "bus topics lists the topic: %+v", ts)
	var gs []bus.GroupInfo
	require.Eventually(t, func() bool {
		code, stdout, _ := runCLI(t, "", "groups", "--url", url, "--topic", "orders", "--json")
		return code == exitOK && json.Unmarshal([]byte(stdout), &gs) == nil &&
			slices.ContainsFunc(gs, func(g bus.GroupInfo) bool { return g.Name == "billing" })
	}, 30*time.Second, 200*time.Millisecond, "bus groups lists the group: %+v", gs)
	for _, ti := range ts {
		assert.False(t, ti.Messages.Known(), "%s: an SNS topic counts nothing: unknown, never 0", ti.Name)
	}
	for _, g := range gs {
		assert.False(t, g.Consumers.Known(), "%s: SQS does not know who receives", g.Name)
		assert.True(t, g.Lag.Known() && g.Pending.Known(), "%s: lag and pending from the queue's attributes", g.Name)
	}
	code, stdout, stderr = runCLI(t, "", "groups", "--url", url, "--topic", "orders")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "billing")
	assert.Contains(t, stdout, "unknown", "the table shows the unknown consumers as unknown")
}
