package redisstream_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/redisstream"
)

// The crash test re-executes the test binary as a consumer that the
// parent kills with SIGKILL mid-handler. These variables configure it.
const (
	childEnv        = "REDISSTREAM_TEST_CHILD"
	childURLEnv     = "REDISSTREAM_TEST_CHILD_URL"
	childTopicEnv   = "REDISSTREAM_TEST_CHILD_TOPIC"
	childGroupEnv   = "REDISSTREAM_TEST_CHILD_GROUP"
	childStuckEnv   = "REDISSTREAM_TEST_CHILD_STUCK_AFTER"
	childAckTimeout = time.Second
)

// runChild consumes the topic, printing "GOT <id> <attempt>" for every
// message its handler finishes. After STUCK_AFTER messages every handler
// blocks for ever, printing "STUCK <id>", until the parent kills the
// process.
func runChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ro, err := redis.ParseURL(os.Getenv(childURLEnv))
	if err != nil {
		fail(err)
	}
	be, err := redisstream.New(redis.NewClient(ro), nil)
	if err != nil {
		fail(err)
	}
	stuckAfter, err := strconv.Atoi(os.Getenv(childStuckEnv))
	if err != nil {
		fail(err)
	}
	b := bus.New(be)
	var mu sync.Mutex
	done := 0
	block := make(chan struct{}) // never closed: the process is killed
	_, err = b.Subscribe(context.Background(), os.Getenv(childTopicEnv), func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		if done >= stuckAfter {
			fmt.Fprintf(os.Stdout, "STUCK %s\n", d.ID)
			mu.Unlock()
			<-block
		}
		done++
		fmt.Fprintf(os.Stdout, "GOT %s %d\n", d.ID, d.Attempt)
		mu.Unlock()
		return nil
	}, bus.WithGroup(os.Getenv(childGroupEnv)), bus.WithAckTimeout(childAckTimeout),
		bus.WithMaxInFlight(8), bus.WithStartFrom(backend.StartOldest))
	if err != nil {
		fail(err)
	}
	<-block
}
