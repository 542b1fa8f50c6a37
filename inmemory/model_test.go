package inmemory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

// TestRandomOperationsKeepTheInvariants drives two groups of two members
// with random publishes, receives, acks, nacks, extends and dead-letters,
// then drains. Leases are long, so every settlement it makes is of an
// active lease. It checks that a settled message never comes back to its
// group, that attempts grow, that every message is settled by every group
// exactly once, and that the topic ends empty.
func TestRandomOperationsKeepTheInvariants(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runModel(t, seed)
		})
	}
}

type modelMember struct {
	group string
	sub   backend.Subscription
	held  []*backend.Message
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	be := newBackend(t, &inmemory.Options{MaxBacklog: 64, BacklogPolicy: inmemory.BacklogError})
	ctx := context.Background()
	const topic = "model"
	var members []*modelMember
	for _, g := range []string{"a", "b"} {
		for range 2 {
			members = append(members, &modelMember{group: g, sub: subscribe(t, be, topic, g)})
		}
	}
	subscribe(t, be, "model.dlq", "dlq") // keeps the dead letters countable
	settled := map[string]map[string]bool{"a": {}, "b": {}}
	lastAttempt := map[string]int{}
	published := 0

	receive := func(m *modelMember, max int) {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		got, err := m.sub.Receive(rctx, max)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		for _, msg := range got {
			require.False(t, settled[m.group][msg.ID], "group %s got %s again after settling it", m.group, msg.ID)
			key := m.group + "/" + msg.ID
			require.Greater(t, msg.Attempt, lastAttempt[key], "attempt grows for %s", key)
			lastAttempt[key] = msg.Attempt
			cp := *msg // a Receive may reuse its messages
			m.held = append(m.held, &cp)
		}
	}
	settle := func(m *modelMember, i int, how int) {
		msg := m.held[i]
		m.held = append(m.held[:i], m.held[i+1:]...)
		switch how {
		case 0:
			require.NoError(t, m.sub.Ack(ctx, []backend.AckID{msg.AckID}))
			settled[m.group][msg.ID] = true
		case 1:
			require.NoError(t, m.sub.Nack(ctx, msg.AckID, time.Duration(rng.IntN(3))*time.Millisecond))
		case 2:
			require.NoError(t, m.sub.(backend.DeadLetterer).DeadLetter(ctx, msg.AckID, "model.dlq", msg))
			settled[m.group][msg.ID] = true
		}
	}

	for range 400 {
		m := members[rng.IntN(len(members))]
		switch op := rng.IntN(10); {
		case op < 3:
			n := 1 + rng.IntN(5)
			err := be.Publish(ctx, topic, msgs(fmt.Sprintf("p%d-", published), n))
			if err == nil {
				published += n
			} else {
				require.ErrorIs(t, err, inmemory.ErrBacklogFull)
			}
		case op < 6:
			receive(m, 1+rng.IntN(8))
		case op < 9 && len(m.held) > 0:
			settle(m, rng.IntN(len(m.held)), []int{0, 0, 0, 1, 2}[rng.IntN(5)])
		case len(m.held) > 0:
			require.NoError(t, m.sub.(backend.Extender).Extend(ctx, m.held[rng.IntN(len(m.held))].AckID))
		}
	}

	// Drain: settle everything held, then receive and ack until every
	// group has settled every message.
	deadline := time.Now().Add(10 * time.Second)
	for len(settled["a"])+len(settled["b"]) < 2*published {
		require.True(t, time.Now().Before(deadline), "drained %d/%d and %d/%d", len(settled["a"]), published, len(settled["b"]), published)
		for _, m := range members {
			for len(m.held) > 0 {
				settle(m, 0, 0)
			}
			receive(m, 16)
		}
	}
	st := stats(t, be, topic)
	require.Zero(t, st.Backlog, "every entry settled by both groups")
	require.Zero(t, st.BacklogBytes)
	require.Zero(t, st.Window, "the log is empty")
	for _, g := range st.Groups {
		require.Zero(t, g.Ready+g.Delayed+g.Undelivered, "group %s has nothing left", g.Name)
	}
}
