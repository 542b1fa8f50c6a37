package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

// TestCLIOpensSQSURLs: bus publish opens an sqs URL; bus
// topics, bus groups and the dashboard's inspector show the topic and its
// group where the backend can be inspected, and say clearly that it
// cannot where it has no backend.Inspector.
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

	_, inspectErr := b.Topics(ctx)
	in, closeIn, err := openInspector(ctx, url)
	if errors.Is(inspectErr, bus.ErrUnsupported) {
		require.Error(t, err, "the dashboard's history needs an inspector")
		assert.Contains(t, err.Error(), "sqs cannot be inspected")
		code, _, stderr = runCLI(t, "", "topics", "--url", url)
		assert.Equal(t, exitFailure, code, "bus topics cannot list an sqs backend without an inspector")
		assert.Contains(t, stderr, "unsupported", "and says so")
		code, _, stderr = runCLI(t, "", "groups", "--url", url, "--topic", "orders")
		assert.Equal(t, exitFailure, code, "bus groups cannot list an sqs backend without an inspector")
		assert.Contains(t, stderr, "unsupported", "and says so")
		return
	}
	require.NoError(t, inspectErr)
	require.NoError(t, err)
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
}
