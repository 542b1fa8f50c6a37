package natstest

import (
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EnvURL is the environment variable that names an external NATS server.
const EnvURL = "BUS_NATS_URL"

// readyTimeout bounds how long a starting server may take.
const readyTimeout = 10 * time.Second

// Option adjusts the server options before the server starts.
type Option func(*server.Options)

// WithoutJetStream starts a core-only server.
func WithoutJetStream() Option {
	return func(o *server.Options) { o.JetStream = false }
}

// Server is an embedded nats-server owned by one test.
type Server struct {
	tb   testing.TB
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
	log *warnLogger // the running server's
}

// Start runs an embedded server with JetStream on a free loopback port and
// a temporary store. It fails the test if the server does not come up.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  tb.TempDir(),
		NoLog:     true,
		NoSigs:    true,
		// Small limits keep test servers light.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{tb: tb, opts: o}
	if err := s.start(); err != nil {
		tb.Fatalf("natstest: start: %v", err)
	}
	tb.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start() error {
	o := s.opts
	srv, err := server.NewServer(&o)
	if err != nil {
		return err
	}
	log := &warnLogger{tb: s.tb}
	srv.SetLogger(log, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		log.stop()
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("not ready after %v", readyTimeout)
	}
	if s.opts.Port == server.RANDOM_PORT {
		// Pin the port so Restart comes back where clients reconnect.
		addr, ok := srv.Addr().(*net.TCPAddr)
		if !ok {
			log.stop()
			srv.Shutdown()
			srv.WaitForShutdown()
			return fmt.Errorf("unexpected listen address %v", srv.Addr())
		}
		s.opts.Port = addr.Port
	}
	s.srv, s.log = srv, log
	return nil
}

// URL returns the server's client URL, nats://127.0.0.1:<port>.
func (s *Server) URL() string {
	return fmt.Sprintf("nats://%s:%d", s.opts.Host, s.opts.Port)
}

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.log.stop()
	s.srv, s.log = nil, nil
}

// Restart stops the server (if it runs) and starts it again on the same
// port and store directory. It fails the test if the server does not come
// back.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	// The port was just released; retry briefly in case the kernel has not
	// let go of it yet.
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("natstest: restart on port %d: %v", s.opts.Port, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Running reports whether the server is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// URL returns $BUS_NATS_URL when set, otherwise the URL of a new embedded
// server that lives until the test ends.
func URL(tb testing.TB, opts ...Option) string {
	tb.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(tb, opts...).URL()
}
