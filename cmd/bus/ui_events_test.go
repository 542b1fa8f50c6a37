package main

import (
	"bytes"
	"context"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
)

// The dashboard's bus writes a replayed event for each replay to the
// events topic when it is there already, and says when it is not.
func TestDashboardReplaysWriteReplayedEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const url = "mem://ui-replay-events-test"
	b, ok, _ := seedDeadLetters(t, url, "orders", "o-1")
	ok.Store(true)

	var stderr bytes.Buffer
	plain, err := openUIBus(ctx, flag.NewFlagSet("ui", flag.ContinueOnError), url, defaultEventsTopic, &stderr)
	require.NoError(t, err)
	require.NoError(t, plain.Close(ctx))
	assert.Contains(t, stderr.String(), "there is no events topic "+defaultEventsTopic, "without an events topic the dashboard says replays write no event")

	require.NoError(t, b.Publish(ctx, defaultEventsTopic, &bus.Message{Payload: []byte("{}")}), "a bus writes events there")
	stderr.Reset()
	ui, err := openUIBus(ctx, flag.NewFlagSet("ui", flag.ContinueOnError), url, defaultEventsTopic, &stderr)
	require.NoError(t, err)
	assert.Empty(t, stderr.String(), "the events topic is there")
	n, err := ui.ReplayDeadLetters(ctx, "orders.dlq", "o-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, ui.Close(ctx), "close flushes the events")

	in, done, err := openInspector(ctx, url)
	require.NoError(t, err)
	defer done()
	h, err := lifecycle.Read(ctx, in, defaultEventsTopic, lifecycle.Query{ID: "o-1"})
	require.NoError(t, err)
	var kinds []lifecycle.Kind
	for _, e := range h.Entries {
		kinds = append(kinds, e.Kind)
	}
	assert.Contains(t, kinds, lifecycle.Replayed, "the replay wrote its event: %v", kinds)
}
