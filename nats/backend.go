package nats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/topiccache"
	"github.com/eventbus-go/bus/observer"
)

func init() {
	for _, scheme := range []string{"nats", "tls", "nats+tls"} {
		bus.Register(scheme, func(ctx context.Context, u *url.URL) (backend.Backend, error) {
			return Open(ctx, u, nil)
		})
	}
}

// headerRoom is kept free of the server's max_payload for headers, so a
// payload at Capabilities().MaxPayload still fits with the largest header
// block the bus accepts: 64 headers of 16 KiB of keys and values, base64
// where the wire needs it (4/3), the list of encoded keys, a 1 KiB key,
// the ID and the backend's own headers come to under 48 KiB.
const headerRoom = 64 << 10

// Backend is a bus backend on NATS JetStream (the default) or core NATS.
// It is safe for concurrent use.
type Backend struct {
	nc      *natsgo.Conn
	ownConn bool
	js      jetstream.JetStream
	// released is the bucket of released deliveries (release.go).
	released releases
	// locks is the bucket of group locks (locker.go).
	locks releases
	// results are the buckets of the handlers' results (result.go).
	results resultBuckets
	opts    Options
	caps    backend.Capabilities
	v210    bool // server is 2.10 or later

	mu   sync.Mutex
	subs map[subscriber]struct{}
	// behind holds the lock keys (lockKey) of groups whose member closed
	// a subscription that may have left deliveries at the server, which
	// come back only after their AckWait: UnlockGroup lets such a lock
	// lapse instead of releasing it (see jsSub.leavesBehind). Under mu.
	behind map[string]struct{}

	streams sync.Map // stream name -> struct{}: streams known to exist
	// schedStreams: stream name -> struct{}: streams known to store
	// schedules (see schedulesReady).
	schedStreams sync.Map
	// promoters: topic -> *promoter, the promoters of the topics this
	// backend has subscriptions on (promote.go).
	promoMu   sync.Mutex
	promoters map[string]*promoter
	promoWG   sync.WaitGroup // every promoter's goroutine
	topics    topiccache.Cache[*topicNames]
	// pubs holds the publishes waiting for their acks (publish.go).
	pubs pubAcks
	// trimmer purges bounded topics of a shared stream (retention.go).
	trimmer boundTrimmer

	closed atomic.Bool
	server atomic.Value            // string: redacted URL of the last server connected to
	origin atomic.Pointer[url.URL] // the URL Open dialled, for redacting its secrets
}

// subscriber is what the backend tells about connection events.
type subscriber interface {
	connectionEvent(err error)
}

// New returns a Backend over nc, which the caller keeps owning: Close
// does not close it. opts may be nil. The connection settings in opts
// (credentials, TLS, reconnects) are ignored; configure nc instead.
func New(nc *natsgo.Conn, opts *Options) (*Backend, error) {
	if nc == nil {
		return nil, fmt.Errorf("nats: new: %w: nil connection", ErrInvalidOption)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("nats: new: %w", err)
	}
	return newBackend(nc, false, o)
}

// connOptions are the nats.go options of a connection Open dials;
// serverURL is redacted, and redact masks the URL's secrets in errors.
func (o *Options) connOptions(serverURL string, secure bool, redact func(error) error) ([]natsgo.Option, error) {
	log := o.Logger
	nopts := []natsgo.Option{
		natsgo.Name(o.Name),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(o.ReconnectWait),
		natsgo.PingInterval(o.PingInterval),
		natsgo.MaxPingsOutstanding(o.MaxPingsOut),
		natsgo.Timeout(o.ConnectTimeout),
		natsgo.DisconnectErrHandler(func(nc *natsgo.Conn, err error) {
			log.Warn("nats: disconnected", "url", serverURL, "err", redact(err))
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			log.Info("nats: reconnected", "url", connectedURL(nc))
		}),
	}
	if o.CredsFile != "" {
		nopts = append(nopts, natsgo.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		opt, err := natsgo.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed: %w", err)
		}
		nopts = append(nopts, opt)
	}
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.TLSConfig != nil {
			cfg = o.TLSConfig.Clone()
		}
		if o.TLSServerName != "" {
			cfg.ServerName = o.TLSServerName
		}
		if o.TLSCAFile != "" {
			pem, err := os.ReadFile(o.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("tls ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%w: tls ca %q holds no certificate", ErrInvalidOption, o.TLSCAFile)
			}
			cfg.RootCAs = pool
		}
		if o.TLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("tls client certificate: %w", err)
			}
			cfg.Certificates = append(cfg.Certificates, cert)
		}
		nopts = append(nopts, natsgo.Secure(cfg))
	}
	return nopts, nil
}

func newBackend(nc *natsgo.Conn, own bool, o Options) (*Backend, error) {
	b := &Backend{
		nc: nc, ownConn: own, opts: o,
		subs: map[subscriber]struct{}{},

		promoters: map[string]*promoter{},
	}
	b.v210 = serverAtLeast(nc.ConnectedServerVersion(), 2, 10)
	maxPayload, limit := 0, ""
	if mp := int(nc.MaxPayload()); mp > 2*headerRoom {
		maxPayload = mp - headerRoom
		limit = fmt.Sprintf("the NATS server's max_payload (%d bytes) less %d bytes kept for the message's headers; "+
			"raise max_payload in the server's configuration", mp, headerRoom)
	}
	if o.CoreNATS {
		b.caps = backend.Capabilities{
			Name:            "nats-core",
			ConsumerGroups:  true,
			Ordered:         true,
			MaxPayload:      maxPayload,
			MaxPayloadLimit: limit,
		}
	} else {
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(o.PublishWindow),
			jetstream.WithPublishAsyncTimeout(o.PublishTimeout),
			jetstream.WithPublishAsyncAckHandler(b.pubs.acked),
			jetstream.WithPublishAsyncErrHandler(b.pubs.failed),
		)
		if err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		b.js = js
		b.caps = backend.Capabilities{
			Name:            "nats",
			ConsumerGroups:  true,
			Persistent:      o.Storage == StorageFile,
			Redelivery:      true,
			NackDelay:       true,
			Ordered:         true,
			StartOldest:     true,
			PublishDedup:    true,
			Extend:          true,
			Scheduling:      !o.noSchedules && o.Retention != RetentionInterest,
			Broadcast:       true,
			Results:         true,
			MaxPayload:      maxPayload,
			MaxPayloadLimit: limit,
			// JetStream confirms each message of a batch on its own.
			AsyncBatches: 16,
		}
	}
	b.watchConnection()
	return b, nil
}

// watchConnection forwards disconnects and reconnects to the observers of
// live subscriptions, keeping any handlers already on the connection.
func (b *Backend) watchConnection() {
	b.server.Store(connectedURL(b.nc))
	prevDisc := b.nc.Opts.DisconnectedErrCB
	b.nc.SetDisconnectErrHandler(func(nc *natsgo.Conn, err error) {
		if prevDisc != nil {
			prevDisc(nc, err)
		}
		if err == nil {
			err = natsgo.ErrDisconnected
		}
		b.notify(fmt.Errorf("nats: disconnected from %s: %w", b.server.Load(), b.redact(err)))
	})
	prevRec := b.nc.Opts.ReconnectedCB
	b.nc.SetReconnectHandler(func(nc *natsgo.Conn) {
		if prevRec != nil {
			prevRec(nc)
		}
		b.server.Store(connectedURL(nc))
		b.notify(fmt.Errorf("nats: reconnected to %s", connectedURL(nc)))
	})
	prevErr := b.nc.Opts.AsyncErrorCB
	b.nc.SetErrorHandler(func(nc *natsgo.Conn, sub *natsgo.Subscription, err error) {
		if prevErr != nil {
			prevErr(nc, sub, err)
		}
		b.notify(fmt.Errorf("nats: connection error: %w", b.redact(err)))
	})
}

func (b *Backend) notify(err error) {
	b.mu.Lock()
	subs := make([]subscriber, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.connectionEvent(err)
	}
}

func (b *Backend) track(s subscriber) {
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
}

// closeSub ends subscription s once: it closes closed, stops tracking s
// and unsubscribes sub. Later calls return nil.
func (b *Backend) closeSub(s subscriber, once *sync.Once, closed chan struct{}, sub *natsgo.Subscription, topic string) error {
	first := false
	once.Do(func() {
		first = true
		close(closed)
	})
	if !first {
		return nil
	}
	b.untrack(s)
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) && !errors.Is(err, natsgo.ErrBadSubscription) {
		return fmt.Errorf("nats: close subscription %q: %w", topic, err)
	}
	return nil
}

func (b *Backend) untrack(s subscriber) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

// Conn returns the underlying connection.
func (b *Backend) Conn() *natsgo.Conn { return b.nc }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities { return b.caps }

// Close implements backend.Backend. It closes the connection only when
// the Backend opened it.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return fmt.Errorf("nats: close: %w", backend.ErrClosed)
	}
	b.stopPromoters()
	b.trimmer.close()
	if b.ownConn {
		b.nc.Close()
	}
	return nil
}

var _ backend.Pinger = (*Backend)(nil)

// Ping implements backend.Pinger: one PING to the server the connection
// is on, waiting for its PONG within ctx (within Options.PublishTimeout
// when ctx has no deadline).
func (b *Backend) Ping(ctx context.Context) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: ping: %w", backend.ErrClosed)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.PublishTimeout)
		defer cancel()
	}
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats: ping: %w", err)
	}
	return nil
}

// Subscribe implements backend.Backend.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("nats: subscribe %q: %w", topic, backend.ErrClosed)
	}
	if cfg.Observer == nil {
		cfg.Observer = observer.Nop()
	}
	var (
		s   backend.Subscription
		err error
	)
	if b.opts.CoreNATS {
		s, err = b.subscribeCore(topic, cfg)
	} else {
		s, err = b.subscribeJS(ctx, topic, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe %q: %w", topic, err)
	}
	return s, nil
}

// serverAtLeast reports whether version ("2.10.7", "2.11.0-RC.1") is at
// least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
