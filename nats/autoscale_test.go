package nats_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/autoscaletest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

func TestAutoscaleFollowsAGrowingBacklogUpToMaxAndBackToMin(t *testing.T) {
	srv := natstest.Start(t)
	rec := &autoscaletest.Recorder{}
	b := bus.New(connect(t, srv.URL(), isolated(t, srv.URL(), busnats.Options{})), bus.WithObserver(rec))
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	autoscaletest.Run(t, b, rec, "autoscaled")
}
