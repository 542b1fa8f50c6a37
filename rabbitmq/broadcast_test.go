package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testBroadcastCases runs the conformance suite's Broadcast cases on the
// backend with a stand-in for the inspection they need
// (backend.Inspector, which the backend does not have yet): groupLister
// lists the groups subscribed through it whose queue the broker still
// has. What the cases check of DeleteGroup (a closed or dead broadcast
// subscription's queue gone from the broker within the bound) is checked
// on the broker itself.
func testBroadcastCases(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return &groupLister{Backend: b, url: rawURL, groups: map[string][]string{}}
	}, conformance.WithOnly("BroadcastEverySubscriberGetsEveryMessage", "BroadcastCloseLeavesNoGroup", "BroadcastDeadSubscriberExpires", "BroadcastContradictionsRefused"))
}

// groupLister is the backend with Capabilities.Broadcast and a
// backend.Inspector whose Groups lists, of the groups subscribed through
// it, those whose queue exists at the broker (a passive declare each).
type groupLister struct {
	*rabbitmq.Backend
	url string

	mu     sync.Mutex
	groups map[string][]string // by topic
	conn   *amqp.Connection
}

var _ backend.Inspector = (*groupLister)(nil)

func (g *groupLister) Capabilities() backend.Capabilities {
	c := g.Backend.Capabilities()
	c.Broadcast = true
	return c
}

func (g *groupLister) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	g.mu.Lock()
	if !slices.Contains(g.groups[topic], cfg.Group) {
		g.groups[topic] = append(g.groups[topic], cfg.Group)
	}
	g.mu.Unlock()
	return g.Backend.Subscribe(ctx, topic, cfg)
}

func (g *groupLister) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn == nil || g.conn.IsClosed() {
		c, err := amqp.Dial(g.url)
		if err != nil {
			return nil, err
		}
		g.conn = c
	}
	var out []backend.GroupInfo
	for _, group := range g.groups[topic] {
		ch, err := g.conn.Channel()
		if err != nil {
			return nil, err
		}
		_, err = ch.QueueDeclarePassive("bus.q."+topic+"/"+group, false, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			_ = ch.Close()
			out = append(out, backend.GroupInfo{Name: group, Consumers: backend.Unknown, Pending: backend.Unknown, Lag: backend.Unknown})
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		default:
			return nil, err
		}
	}
	return out, ctx.Err()
}

func (g *groupLister) Close() error {
	g.mu.Lock()
	if g.conn != nil {
		_ = g.conn.Close()
	}
	g.mu.Unlock()
	return g.Backend.Close()
}

func (g *groupLister) Topics(context.Context) ([]backend.TopicInfo, error) {
	return nil, fmt.Errorf("groupLister: %w", bus.ErrUnsupported)
}

func (g *groupLister) Peek(context.Context, string, string, int) ([]*backend.Message, string, error) {
	return nil, "", fmt.Errorf("groupLister: %w", bus.ErrUnsupported)
}

func (g *groupLister) Delete(context.Context, string, []string) (int, error) {
	return 0, fmt.Errorf("groupLister: %w", bus.ErrUnsupported)
}
