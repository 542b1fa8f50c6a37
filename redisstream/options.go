package redisstream

import (
	"errors"
	"fmt"
	"github.com/eventbus-go/bus/backend"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidOption is wrapped by errors about invalid Options or URL
// parameters.
var ErrInvalidOption = backend.ErrInvalidOption

// Retention says how streams are trimmed.
type Retention int

const (
	// RetainSettled (the default) trims only entries that every consumer
	// group of the stream has settled: a background trimmer per topic
	// computes the oldest entry some group still needs (its oldest pending
	// entry, or the entry after its last delivered one) and trims
	// approximately below it with XTRIM MINID. It never drops a message a
	// group has not yet acked, nacked or dead-lettered. It is the default
	// because losing unsettled messages silently is the one thing the bus
	// promises not to do; its cost is that a stalled group makes the
	// stream grow, which MaxLen can cap.
	RetainSettled Retention = iota
	// RetainMaxLen trims each stream to about MaxLen entries on every
	// publish (XADD MAXLEN ~). Unsettled entries may be trimmed; they are
	// then acked, counted and reported when a reclaim meets them.
	RetainMaxLen
	// RetainMaxAge trims entries older than MaxAge on every publish (XADD
	// MINID ~). Unsettled entries may be trimmed, as with RetainMaxLen.
	RetainMaxAge
	// RetainAll never trims.
	RetainAll
)

var retentionNames = map[string]Retention{
	"settled": RetainSettled,
	"maxlen":  RetainMaxLen,
	"maxage":  RetainMaxAge,
	"all":     RetainAll,
}

// String returns the retention's name as used in URLs.
func (r Retention) String() string {
	for k, v := range retentionNames {
		if v == r {
			return k
		}
	}
	return fmt.Sprintf("Retention(%d)", int(r))
}

// Defaults of Options.
const (
	DefaultPrefix       = "bus"
	DefaultBlock        = time.Second
	DefaultTrimInterval = 10 * time.Second
	DefaultMaxPayload   = 64 << 20
	DefaultReadLinger   = 200 * time.Microsecond
	DefaultDedupWindow  = 2 * time.Minute
)

// Options configure a Backend. The zero value (or nil) means every default.
type Options struct {
	// Prefix starts every key (default "bus"): stream keys are
	// "<prefix>:{<tag>}<suffix>"; see the package doc.
	Prefix string
	// Block is the longest one XREADGROUP waits (default and maximum 1s).
	// A cancelled ctx ends a blocked read at once (CLIENT UNBLOCK).
	Block time.Duration
	// ReadLinger is how long a subscription waits before its next
	// XREADGROUP while its stream is busy: the last read found at least 8
	// entries, yet fewer than half of what it asked for, and the last two
	// reads found entries at 50,000 a second or more. One read then takes
	// what arrived meanwhile instead of a read per handful, which saves
	// round trips and server work per message (about a fifth of both at
	// 100,000 messages a second). Messages on such a stream wait up to
	// ReadLinger longer (in a process with nothing else to run, Go's
	// timers stretch a wait under a millisecond to about one); on a
	// quieter stream and on a backlog no read waits. Default 200µs, at
	// most Block; negative turns it off.
	ReadLinger time.Duration
	// Retention chooses the trimming mode (default RetainSettled).
	Retention Retention
	// MaxLen is the approximate stream length for RetainMaxLen, and a
	// hard cap (which may trim unsettled entries) for RetainSettled when
	// set. 0 = no cap.
	MaxLen int64
	// MaxAge is the age limit of RetainMaxAge.
	MaxAge time.Duration
	// TrimInterval is how often the Backend trims each topic it
	// subscribes or published to: what every group settled
	// (RetainSettled) and what lies past a BoundRetention's age (default
	// 10s, at least 10ms). URL: ?trim_interval=.
	TrimInterval time.Duration
	// MaxPayload is the largest payload accepted (default 64 MiB; Redis
	// itself refuses values over its proto-max-bulk-len).
	MaxPayload int
	// DedupWindow is how long a topic remembers the IDs callers set on
	// the messages they publish to it: a message whose caller-set ID was
	// published within it is stored once, and the second Publish returns
	// nil. The IDs are recorded with the messages, in one script call per
	// batch, in a hash per time bucket of the window's length (two
	// hashes per topic, "<stream key>#ids:0" and "#ids:1"); an ID is
	// remembered for at least the window and at most twice it, at about
	// 100 bytes of server memory each (a 36-byte ID). IDs the bus
	// generated are not recorded: a batch of them is plain pipelined
	// XADDs. Zero means DefaultDedupWindow (two minutes); negative turns
	// deduplication off. Every publisher to a topic uses the same window.
	// URL: ?dedup_window= (0 turns it off).
	DedupWindow time.Duration
	// ReadClient, if set, carries the blocking XREADGROUP calls. By default
	// New creates one with the options of the given client (for
	// *redis.Client and *redis.ClusterClient), so reads never queue behind
	// acks and publishes. Other client types need ReadClient. A given
	// ReadClient is not closed by Close.
	ReadClient redis.UniversalClient
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	for _, r := range c.Prefix {
		if r == '{' || r == '}' || r == '#' {
			errs = append(errs, fmt.Errorf("%w: prefix %q may not contain '{', '}' or '#'", ErrInvalidOption, c.Prefix))
			break
		}
	}
	switch {
	case c.Block == 0:
		c.Block = DefaultBlock
	case c.Block < time.Millisecond || c.Block > time.Second:
		errs = append(errs, fmt.Errorf("%w: block %v is not within [1ms, 1s]", ErrInvalidOption, c.Block))
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	switch {
	case c.ReadLinger == 0:
		c.ReadLinger = DefaultReadLinger
	case c.ReadLinger > c.Block:
		errs = append(errs, fmt.Errorf("%w: read linger %v is over the block %v", ErrInvalidOption, c.ReadLinger, c.Block))
	}
	switch c.Retention {
	case RetainSettled, RetainAll:
	case RetainMaxLen:
		if c.MaxLen <= 0 {
			errs = append(errs, fmt.Errorf("%w: retention maxlen needs MaxLen > 0", ErrInvalidOption))
		}
	case RetainMaxAge:
		if c.MaxAge < time.Millisecond {
			errs = append(errs, fmt.Errorf("%w: retention maxage needs MaxAge >= 1ms", ErrInvalidOption))
		}
	default:
		errs = append(errs, fmt.Errorf("%w: unknown retention %d", ErrInvalidOption, int(c.Retention)))
	}
	if c.MaxLen < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxLen %d is negative", ErrInvalidOption, c.MaxLen))
	}
	switch {
	case c.TrimInterval == 0:
		c.TrimInterval = DefaultTrimInterval
	case c.TrimInterval < 10*time.Millisecond:
		errs = append(errs, fmt.Errorf("%w: trim interval %v is under 10ms", ErrInvalidOption, c.TrimInterval))
	}
	switch {
	case c.MaxPayload == 0:
		c.MaxPayload = DefaultMaxPayload
	case c.MaxPayload < 0:
		errs = append(errs, fmt.Errorf("%w: MaxPayload %d is negative", ErrInvalidOption, c.MaxPayload))
	}
	return c, errors.Join(errs...)
}
