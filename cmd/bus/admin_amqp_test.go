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
		return code == exitOK && json.Unmarshal([]byte(stdout), &gs) == nil && len(gs) == 1 && gs[0].Lag == 2
	}, 30*time.Second, 200*time.Millisecond, "bus groups shows the lag: %+v", gs)
	assert.Equal(t, "billing", gs[0].Name)
	assert.EqualValues(t, 0, gs[0].Pending)

	code, stdout, stderr := runCLI(t, "", "topics", "--url", url, "--json")
	require.Equal(t, exitOK, code, stderr)
	var ts []bus.TopicInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &ts))
	require.Len(t, ts, 1)
	assert.Equal(t, "orders", ts[0].Name)
	assert.EqualValues(t, 2, ts[0].Messages)

	// Without the management parameter the command says how to turn
	// inspection on.
	code, _, stderr = runCLI(t, "", "topics", "--url", node.URL())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "management")
}
