package redisstream_test

import (
	"testing"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/autoscaletest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

func TestAutoscaleFollowsAGrowingBacklogUpToMaxAndBackToMin(t *testing.T) {
	rec := &autoscaletest.Recorder{}
	b, _, _ := openBus(t, redistest.URL(t), nil, bus.WithObserver(rec))
	autoscaletest.Run(t, b, rec, uniqueTopic(t))
}
