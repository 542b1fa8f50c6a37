package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

// TestTopicsAndGroupsOnRabbitMQ: bus topics and bus groups open an amqp
// URL with the management parameter and show the management API's
// figures: a group that received nothing has the topic's messages as
// its lag.
func TestTopicsAndGroupsOnRabbitMQ(t *testing.T) {
	node := rabbittest.Start(t, rabbittest.WithManagement())
	url := node.InspectURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	defer b.Close(context.Background())
	require.NoError(t, b.CreateGroup(ctx, "orders", "billing"))
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Payload: []byte("a")}, &bus.Message{Payload: []byte("b")}))

	var gs []bus.GroupInfo
	require.Eventually(t, func() bool {
		code, stdout, _ := runCLI(t, "", "groups", "--url", url, "--topic", "orders", "--json")
		return code == exitOK && json.Unmarshal([]byte(stdout), &gs) == nil && len(gs) == 1 && gs[0].Lag == 2 && gs[0].Pending == 0
	}, 30*time.Second, 200*time.Millisecond, "bus groups shows the lag: %+v", gs)
	assert.Equal(t, "billing", gs[0].Name)

	var ts []bus.TopicInfo
	require.Eventually(t, func() bool {
		code, stdout, _ := runCLI(t, "", "topics", "--url", url, "--json")
		return code == exitOK && json.Unmarshal([]byte(stdout), &ts) == nil && len(ts) == 1 && ts[0].Messages == 2
	}, 30*time.Second, 200*time.Millisecond, "bus topics shows the topic: %+v", ts)
	assert.Equal(t, "orders", ts[0].Name)

	// Without the management parameter the command says how to turn
	// inspection on.
	code, _, stderr := runCLI(t, "", "topics", "--url", node.URL())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "management")
}

// TestBenchConsumeOnRabbitMQ: the consume scenario runs on a backend that
// cannot start a group from the oldest message: the group, created
// before the prefill, owes every message, on the bus side and the raw
// side alike.
func TestBenchConsumeOnRabbitMQ(t *testing.T) {
	node := rabbittest.Start(t)
	code, stdout, stderr := runCLI(t, "", "bench", "--url", node.URL(), "-n", "2000", "--scenario", "consume", "--baseline", "--json")
	require.Equal(t, exitOK, code, "the consume scenario runs on amqp://; stderr: %s", stderr)
	_, res := decodeBenchJSON(t, stdout)
	assert.EqualValues(t, 2000, res.Delivered, "the bus's group got the whole prefill")
	assert.Zero(t, res.Duplicates, "no duplicates on the bus side")
	require.NotNil(t, res.Baseline, "baseline object")
	assert.EqualValues(t, 2000, res.Baseline.Delivered, "the raw queue got the whole prefill")
}
