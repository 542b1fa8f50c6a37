package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/inmemory"
)

// The self-test proves that the suite catches broken backends: each
// wrapper of inmemory breaks one guarantee, and a run of the suite's case
// for that guarantee must fail with a readable message within bounded
// time. Each run is a child process of this test binary, so that the
// failure (or a hang) of the broken backend cannot fail or hang this one.

const brokenEnv = "BUS_CONFORMANCE_BROKEN"

// breakages maps each breakage to the case that must catch it.
var breakages = []struct {
	kind, caughtBy string
}{
	{"AckNoop", "SPI/AckSettlesIdempotently"},
	{"NackDelayIgnored", "NackDelayRespected"},
	{"AttemptNeverGrows", "SPI/AttemptCountsUp"},
	{"LeasesNeverExpire", "UnackedRedeliveredAfterAckTimeout"},
	{"ExtendNoop", "ExtendPreventsRedelivery"},
	{"GroupsShareCursor", "TwoGroupsEachGetEveryMessage"},
	{"ReceiveMoreThanMax", "SPI/ReceiveAtMostMax"},
	{"ReceiveIgnoresCtx", "SPI/ReceiveHonoursCtx"},
	{"PublishKeepsBuffers", "SPI/PublishCopiesBuffers"},
	{"StaleAckIgnored", "SPI/StaleRule"},
}

// TestSelftestChild runs the suite over the backend broken as
// $BUS_CONFORMANCE_BROKEN says ("none": not broken). It does nothing in a
// normal run.
func TestSelftestChild(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenBackends")
	}
	conformance.Run(t, func(t testing.TB) backend.Backend {
		be, err := inmemory.New(nil)
		require.NoError(t, err)
		if kind == "none" {
			return be
		}
		return &broken{Backend: be, kind: kind}
	})
}

// runChild runs the suite's case caughtBy over the breakage kind and
// returns whether it passed, and its output.
func runChild(t *testing.T, kind, caughtBy string) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pattern := "^TestSelftestChild$"
	for part := range strings.SplitSeq(caughtBy, "/") {
		pattern += "/^" + part + "$"
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1", "-test.timeout=150s")
	cmd.Env = append(os.Environ(), brokenEnv+"="+kind)
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "the child run for %s did not end within its bound:\n%s", kind, out)
	return err == nil, string(out)
}

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the self-test runs the suite eleven times")
	}
	t.Run("ControlPasses", func(t *testing.T) {
		t.Parallel()
		for _, b := range breakages[:3] {
			ok, out := runChild(t, "none", b.caughtBy)
			require.True(t, ok, "case %s must pass on the unbroken backend:\n%s", b.caughtBy, out)
			require.Contains(t, out, "--- PASS: TestSelftestChild/"+b.caughtBy, "the case ran")
		}
	})
	for _, b := range breakages {
		t.Run(b.kind, func(t *testing.T) {
			t.Parallel()
			ok, out := runChild(t, b.kind, b.caughtBy)
			require.False(t, ok, "the suite did not catch %s:\n%s", b.kind, out)
			require.Contains(t, out, "--- FAIL: TestSelftestChild/"+b.caughtBy, "%s is caught by the case %s:\n%s", b.kind, b.caughtBy, out)
			require.Regexp(t, `(\.go:\d+: \S|Error:\s+\S)`, out, "the failure says what went wrong")
		})
	}
}

// broken wraps a backend and breaks one guarantee.
type broken struct {
	backend.Backend
	kind string

	mu      sync.Mutex
	pending []pendingPublish // PublishKeepsBuffers: published on the next Receive
}

type pendingPublish struct {
	topic string
	msgs  []*backend.Message
}

func (b *broken) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.kind == "PublishKeepsBuffers" {
		// Keeps the caller's messages (and so their buffers) and stores
		// them later.
		b.mu.Lock()
		b.pending = append(b.pending, pendingPublish{topic, append([]*backend.Message(nil), msgs...)})
		b.mu.Unlock()
		return nil
	}
	return b.Backend.Publish(ctx, topic, msgs)
}

func (b *broken) flush(ctx context.Context) {
	b.mu.Lock()
	p := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, pp := range p {
		_ = b.Backend.Publish(ctx, pp.topic, pp.msgs)
	}
}

func (b *broken) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	switch b.kind {
	case "LeasesNeverExpire":
		cfg.AckTimeout = time.Hour
	case "GroupsShareCursor":
		cfg.Group = "shared"
	}
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &brokenSub{Subscription: sub, b: b}, nil
}

type brokenSub struct {
	backend.Subscription
	b *broken
	// StaleAckIgnored: the message ID of each delivery, and the AckID of
	// each message's latest delivery. A delivery is stale once its
	// message was delivered again, whatever the clocks say.
	received sync.Map // AckID -> message ID
	latest   sync.Map // message ID -> AckID
}

func (s *brokenSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	switch s.b.kind {
	case "PublishKeepsBuffers":
		s.b.flush(ctx)
	case "ReceiveMoreThanMax":
		max += 3
	case "ReceiveIgnoresCtx":
		ctx = context.Background()
	}
	msgs, err := s.Subscription.Receive(ctx, max)
	for _, m := range msgs {
		switch s.b.kind {
		case "AttemptNeverGrows":
			m.Attempt = 1
		case "StaleAckIgnored":
			s.received.Store(m.AckID, m.ID)
			s.latest.Store(m.ID, m.AckID)
		}
	}
	return msgs, err
}

func (s *brokenSub) Ack(ctx context.Context, ids []backend.AckID) error {
	switch s.b.kind {
	case "AckNoop":
		return nil
	case "StaleAckIgnored":
		live := ids[:0:0]
		for _, id := range ids {
			if msgID, ok := s.received.Load(id); ok {
				if last, _ := s.latest.Load(msgID); last != id {
					continue // a redelivered delivery's ack is dropped
				}
			}
			live = append(live, id)
		}
		ids = live
	}
	return s.Subscription.Ack(ctx, ids)
}

func (s *brokenSub) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	if s.b.kind == "NackDelayIgnored" {
		delay = 0
	}
	return s.Subscription.Nack(ctx, id, delay)
}

func (s *brokenSub) Extend(ctx context.Context, id backend.AckID) error {
	if s.b.kind == "ExtendNoop" {
		return nil
	}
	return s.Subscription.(backend.Extender).Extend(ctx, id)
}

func (s *brokenSub) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	return s.Subscription.(backend.DeadLetterer).DeadLetter(ctx, id, topic, msg)
}
