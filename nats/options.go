package nats

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/eventbus-go/bus/backend"
	"log/slog"
	"strings"
	"time"
)

// ErrInvalidOption is wrapped by errors about invalid Options or URL
// parameters.
var ErrInvalidOption = backend.ErrInvalidOption

// StreamMode says how topics map onto JetStream streams.
type StreamMode int

const (
	// StreamPerTopic (the default) stores each topic in a stream of its
	// own, named StreamPrefix + "_" + the escaped topic.
	StreamPerTopic StreamMode = iota
	// StreamShared stores every topic in one stream, StreamName, whose
	// subject is SubjectPrefix + ".>".
	StreamShared
)

// String returns "per-topic" or "shared".
func (m StreamMode) String() string {
	switch m {
	case StreamPerTopic:
		return "per-topic"
	case StreamShared:
		return "shared"
	}
	return fmt.Sprintf("StreamMode(%d)", int(m))
}

// Storage is where JetStream keeps a stream.
type Storage int

const (
	// StorageFile (the default) survives server restarts.
	StorageFile Storage = iota
	// StorageMemory is faster and lost when the server restarts.
	StorageMemory
)

// Retention is the retention policy of created streams.
type Retention int

const (
	// RetentionLimits (the default) keeps messages until the stream's
	// limits (MaxAge, MaxBytes, MaxMsgs) drop them, whoever consumed them.
	RetentionLimits Retention = iota
	// RetentionInterest drops a message once every consumer group that
	// existed when it was stored has acked it.
	RetentionInterest
)

// Defaults of Options.
const (
	DefaultSubjectPrefix  = "bus"
	DefaultStreamPrefix   = "BUS"
	DefaultStreamName     = "BUS"
	DefaultPublishWindow  = 1000
	DefaultPublishTimeout = 10 * time.Second
	DefaultReconnectWait  = 250 * time.Millisecond
	DefaultPingInterval   = 20 * time.Second
	DefaultMaxPingsOut    = 3
	DefaultConnectTimeout = 2 * time.Second
)

// Options configures a Backend. A nil *Options means every default. Zero
// fields take the documented defaults.
type Options struct {
	// CoreNATS selects core NATS (at-most-once, queue groups, nothing
	// stored) instead of JetStream. URL: ?jetstream=false.
	CoreNATS bool

	// SubjectPrefix is put before every topic: topic "orders.created" is
	// subject "bus.orders.created" with the default "bus". URL: ?prefix=.
	SubjectPrefix string

	// StreamMode chooses one stream per topic (default) or one shared
	// stream. URL: ?streams=per-topic|shared.
	StreamMode StreamMode
	// StreamPrefix names per-topic streams. The default derives from
	// SubjectPrefix, so that buses with different subject prefixes never
	// share a stream: "BUS" for the default subject prefix "bus", else
	// "BUS-" and the subject prefix (letters and digits kept, any other
	// byte as "-" and two hex digits). URL: ?stream_prefix=.
	StreamPrefix string
	// StreamName names the shared stream; its default derives from
	// SubjectPrefix like StreamPrefix's. URL: ?stream=.
	StreamName string
	// BindOnly binds to existing streams and never creates them; a
	// missing stream is an error. URL: ?bind=true.
	BindOnly bool
	// Storage of created streams (default file). URL: ?storage=file|memory.
	Storage Storage
	// Retention of created streams (default limits). URL:
	// ?retention=limits|interest.
	Retention Retention
	// Replicas of created streams (default 1, at most 5). URL: ?replicas=.
	Replicas int
	// MaxAge, MaxBytes and MaxMsgs limit created streams (0 = unlimited).
	// URL: ?max_age=24h&max_bytes=&max_msgs=.
	MaxAge   time.Duration
	MaxBytes int64
	MaxMsgs  int64
	// Duplicates is the server-side deduplication window for Nats-Msg-Id
	// (0 = the server's default, two minutes). URL: ?duplicates= or
	// ?dedup_window= (the name every backend knows; JetStream always
	// deduplicates, so 0 is refused).
	Duplicates time.Duration
	// Compression asks for S2 compression of created streams. It is used
	// only when the server is 2.10 or later and ignored otherwise. URL:
	// ?compression=true.
	Compression bool

	// PublishWindow bounds the asynchronous publishes waiting for their
	// acknowledgement, across the Backend (default 1000). URL:
	// ?publish_window=.
	PublishWindow int
	// PublishTimeout bounds the wait for one publish acknowledgement
	// (default 10s). URL: ?publish_timeout=.
	PublishTimeout time.Duration

	// Connection settings, used by Connect and Open only (New takes a
	// connection the caller configured).

	// Name is the connection name shown by the server (default "bus").
	Name string
	// CredsFile is a user credentials file (JWT and nkey seed). URL:
	// ?creds=/path.
	CredsFile string
	// NKeySeedFile is a file holding an nkey seed. URL: ?nkey=/path.
	NKeySeedFile string
	// TLSCAFile, TLSCertFile/TLSKeyFile and TLSServerName configure TLS.
	// URL: ?tls_ca=&tls_cert=&tls_key=&tls_server_name=. Setting any of
	// them, or the tls:// or nats+tls:// scheme, requires TLS.
	TLSCAFile     string
	TLSCertFile   string
	TLSKeyFile    string
	TLSServerName string
	// TLSConfig, when set, is used as the base TLS configuration.
	TLSConfig *tls.Config
	// ReconnectWait is the pause between reconnect attempts (default
	// 250ms). The connection reconnects forever.
	ReconnectWait time.Duration
	// PingInterval and MaxPingsOut detect a dead connection (defaults 20s
	// and 3).
	PingInterval time.Duration
	MaxPingsOut  int
	// ConnectTimeout bounds the first connection, the server's greeting
	// included (default 2s, as nats.go's): a server that does not speak
	// NATS fails by then.
	ConnectTimeout time.Duration

	// Logger gets connection events with redacted URLs (default: discard).
	Logger *slog.Logger

	// noSchedules stores delayed messages at once, as a stream that
	// cannot store schedules does, so tests cover that fallback (see
	// schedule.go).
	noSchedules bool
}

// withDefaults returns a copy of o with defaults filled in, validated.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.StreamPrefix == "" {
		c.StreamPrefix = derivedStreamName(DefaultStreamPrefix, c.SubjectPrefix)
	}
	if c.StreamName == "" {
		c.StreamName = derivedStreamName(DefaultStreamName, c.SubjectPrefix)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.PublishWindow == 0 {
		c.PublishWindow = DefaultPublishWindow
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.Name == "" {
		c.Name = "bus"
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = DefaultReconnectWait
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.MaxPingsOut == 0 {
		c.MaxPingsOut = DefaultMaxPingsOut
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, c.check()
}

// check validates options with their defaults filled in.
func (c *Options) check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
	}
	if !validSubjectPrefix(c.SubjectPrefix) {
		bad("subject prefix %q: want dot-separated tokens without wildcards or spaces", c.SubjectPrefix)
	}
	if !validStreamName(c.StreamPrefix) {
		bad("stream prefix %q: want letters, digits, - and _", c.StreamPrefix)
	}
	if !validStreamName(c.StreamName) {
		bad("stream name %q: want letters, digits, - and _", c.StreamName)
	}
	if c.StreamMode != StreamPerTopic && c.StreamMode != StreamShared {
		bad("stream mode %d", int(c.StreamMode))
	}
	if c.Storage != StorageFile && c.Storage != StorageMemory {
		bad("storage %d", int(c.Storage))
	}
	if c.Retention != RetentionLimits && c.Retention != RetentionInterest {
		bad("retention %d", int(c.Retention))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		bad("replicas %d, want 1..5", c.Replicas)
	}
	if c.MaxAge < 0 || c.MaxBytes < 0 || c.MaxMsgs < 0 || c.Duplicates < 0 {
		bad("stream limits must not be negative")
	}
	if c.PublishWindow < 1 {
		bad("publish window %d, want >= 1", c.PublishWindow)
	}
	if c.PublishTimeout < 0 || c.ReconnectWait < 0 || c.PingInterval < 0 || c.ConnectTimeout < 0 || c.MaxPingsOut < 0 {
		bad("durations and counts must not be negative")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("tls_cert and tls_key go together")
	}
	return errors.Join(errs...)
}

func (o *Options) wantTLS() bool {
	return o.TLSCAFile != "" || o.TLSCertFile != "" || o.TLSServerName != "" || o.TLSConfig != nil
}

// derivedStreamName is base for the default subject prefix, and base + "-"
// + the subject prefix escaped injectively into stream-name characters
// otherwise. The escape never writes "_", which separates the topic in
// per-topic stream names, so no two prefixes share a stream.
func derivedStreamName(base, subjectPrefix string) string {
	if subjectPrefix == DefaultSubjectPrefix {
		return base
	}
	var b strings.Builder
	b.WriteString(base)
	b.WriteByte('-')
	for i := 0; i < len(subjectPrefix); i++ {
		c := subjectPrefix[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "-%02x", c)
	}
	return boundName(b.String())
}

func validStreamName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
