package natstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is n embedded servers joined in one JetStream cluster on
// loopback, the way NATS runs in production (R3 streams need three).
type Cluster struct {
	Servers []*Server
}

// StartCluster starts n servers with JetStream, each with its own store
// directory, routed to each other, and waits until JetStream has a meta
// leader. Clients that connect to one server learn the others and fail
// over to them. It fails the test if the cluster does not form.
func StartCluster(tb testing.TB, n int, opts ...Option) *Cluster {
	tb.Helper()
	ports := freePorts(tb, n)
	c := &Cluster{}
	for i := range n {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		node := append([]Option{func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i)
			o.Cluster.Name = "bus-test"
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = ports[i]
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}}, opts...)
		c.Servers = append(c.Servers, Start(tb, node...))
	}
	c.waitForJetStream(tb)
	return c
}

// URL returns the client URL of the first server.
func (c *Cluster) URL() string { return c.Servers[0].URL() }

// waitForJetStream waits until every server is routed to all the others
// and answers JetStream requests, which it does once the cluster has
// elected a meta leader and the server is in contact with it, and then
// until the cluster places a stream on all its servers, which it does
// once its meta leader knows every server: a stream or key-value bucket
// of three replicas made before that fails with "no suitable peers for
// placement".
func (c *Cluster) waitForJetStream(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(clusterReadyTimeout)
	for i, s := range c.Servers {
		for s.numRoutes() < len(c.Servers)-1 {
			if time.Now().After(deadline) {
				tb.Fatalf("natstest: cluster of %d: server %d has %d routes after %v", len(c.Servers), i, s.numRoutes(), clusterReadyTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		retryOn(tb, s.URL(), deadline, "JetStream answers", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.AccountInfo(ctx)
			return err
		})
	}
	cfg := jetstream.StreamConfig{Name: "natstest_ready", Subjects: []string{"natstest.ready"}, Replicas: len(c.Servers), Storage: jetstream.MemoryStorage}
	retryOn(tb, c.URL(), deadline, "a stream of every server's replicas is placed", func(ctx context.Context, js jetstream.JetStream) error {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return err
		}
		return js.DeleteStream(ctx, cfg.Name)
	})
}

// retryOn runs try on a connection to the server at url, every 50 ms
// until it succeeds, and fails the test once deadline has passed.
func retryOn(tb testing.TB, url string, deadline time.Time, what string, try func(context.Context, jetstream.JetStream) error) {
	tb.Helper()
	nc, err := natsgo.Connect(url, natsgo.DontRandomize())
	if err != nil {
		tb.Fatalf("natstest: cluster: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("natstest: cluster: %v", err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := try(ctx, js)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("natstest: cluster at %s: not ready after %v (%s): %v", url, clusterReadyTimeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterReadyTimeout bounds how long a cluster may take to elect its
// JetStream meta leader.
const clusterReadyTimeout = 30 * time.Second

// freePorts returns n loopback ports that are free now, for the cluster
// routes (every server must know the others' before it starts).
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = serverproc.FreePort(tb)
	}
	return ports
}

// numRoutes is how many routes to other servers the server has.
func (s *Server) numRoutes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv.NumRoutes()
}
