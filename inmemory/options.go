package inmemory

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// Sentinel errors of this package; use errors.Is.
var (
	// ErrInvalidOption: an Options field or URL parameter is invalid.
	ErrInvalidOption = backend.ErrInvalidOption
	// ErrBacklogFull: the topic's backlog is at MaxBacklog or
	// MaxBacklogBytes and the policy is BacklogError, or a batch is larger
	// than a limit.
	ErrBacklogFull = errors.New("backlog full")
)

// Defaults used when Options leaves a field zero.
const (
	DefaultMaxBacklog      = 50_000
	DefaultMaxBacklogBytes = 32 << 20
	DefaultDedupWindow     = 2 * time.Minute
)

// BacklogPolicy says what Publish does when a topic's backlog is full.
type BacklogPolicy int

const (
	// BacklogWait makes Publish wait until the groups have settled enough
	// entries for the whole batch, or until its ctx ends.
	BacklogWait BacklogPolicy = iota
	// BacklogError makes Publish return an error wrapping ErrBacklogFull at
	// once.
	BacklogError
)

// String returns "wait" or "error", the values of the backlog_policy URL
// parameter.
func (p BacklogPolicy) String() string {
	switch p {
	case BacklogWait:
		return "wait"
	case BacklogError:
		return "error"
	default:
		return "BacklogPolicy(" + strconv.Itoa(int(p)) + ")"
	}
}

// Options configures a Backend. The zero value, like a nil *Options, uses
// every default.
type Options struct {
	// MaxBacklog is the most entries a topic retains that some group has
	// not settled yet (delivered or not). Publish of a batch that would go
	// over it waits or fails, as BacklogPolicy says. A topic with no group
	// keeps at most MaxBacklog entries and drops the oldest instead.
	// Zero means DefaultMaxBacklog (50,000); negative is invalid.
	MaxBacklog int
	// MaxBacklogBytes caps the same entries by size: payload, ID, key and
	// headers plus 256 bytes of bookkeeping per entry. It applies like
	// MaxBacklog; whichever is reached first counts. Zero means
	// DefaultMaxBacklogBytes (32 MiB); negative is invalid.
	MaxBacklogBytes int64
	// BacklogPolicy is what Publish does when the backlog is full.
	// Default BacklogWait.
	BacklogPolicy BacklogPolicy
	// DedupWindow is how long a topic remembers the IDs published to it:
	// a message whose ID was published within it is stored once, and the
	// second Publish returns nil. A topic remembers at most MaxBacklog
	// IDs; under a load that publishes more within the window, it forgets
	// the oldest early. The IDs the bus gives messages published without
	// one are remembered in blocks of 64 that it made together, each until
	// the window has passed since the latest of its block was published.
	// Zero means DefaultDedupWindow (two minutes); negative turns
	// deduplication off. URL: ?dedup_window= (0 turns it off).
	DedupWindow time.Duration
}

// dedupMax is the most IDs a topic remembers.
func (o Options) dedupMax() int { return o.MaxBacklog }

// normalize validates o and fills in the defaults.
func (o *Options) normalize() (Options, error) {
	var n Options
	if o != nil {
		n = *o
	}
	if n.MaxBacklog < 0 {
		return n, fmt.Errorf("inmemory: %w: MaxBacklog %d is negative", ErrInvalidOption, n.MaxBacklog)
	}
	if n.MaxBacklog == 0 {
		n.MaxBacklog = DefaultMaxBacklog
	}
	if n.MaxBacklogBytes < 0 {
		return n, fmt.Errorf("inmemory: %w: MaxBacklogBytes %d is negative", ErrInvalidOption, n.MaxBacklogBytes)
	}
	if n.MaxBacklogBytes == 0 {
		n.MaxBacklogBytes = DefaultMaxBacklogBytes
	}
	if n.DedupWindow == 0 {
		n.DedupWindow = DefaultDedupWindow
	}
	if n.BacklogPolicy != BacklogWait && n.BacklogPolicy != BacklogError {
		return n, fmt.Errorf("inmemory: %w: unknown %v", ErrInvalidOption, n.BacklogPolicy)
	}
	return n, nil
}

// optionsFromQuery maps URL query parameters to Options. Unknown or
// repeated parameters are errors.
func optionsFromQuery(q url.Values) (Options, error) {
	var o Options
	p := urlopt.New(q)
	if n, ok := p.Int("max_backlog", 1, math.MaxInt32); ok {
		o.MaxBacklog = n
	}
	if n, ok := p.Int64("max_backlog_bytes", 1, math.MaxInt64); ok {
		o.MaxBacklogBytes = n
	}
	if d, ok := p.Window("dedup_window"); ok {
		o.DedupWindow = d
		if d == 0 {
			o.DedupWindow = -1
		}
	}
	if v, ok := p.Enum("backlog_policy", "wait", "error"); ok {
		o.BacklogPolicy = BacklogWait
		if v == "error" {
			o.BacklogPolicy = BacklogError
		}
	}
	return o, p.Err()
}

// OpenURL opens a backend from a mem URL:
//
//	mem://        a new private broker
//	mem://name    the process-wide broker called name, shared by every
//	              OpenURL of that name until the last one is closed
//
// Query parameters set Options: max_backlog and max_backlog_bytes
// (positive integers) and backlog_policy (wait or error). An unknown parameter is an error. A named
// broker keeps the options it was created with; opening it again with
// parameters that differ is an error.
func OpenURL(u *url.URL) (backend.Backend, error) {
	b, err := openURL(u)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func openURL(u *url.URL) (*Backend, error) {
	if u.Scheme != "mem" {
		return nil, fmt.Errorf("inmemory: open: %w: scheme %q is not mem", ErrInvalidOption, u.Scheme)
	}
	if err := urlopt.CheckForm(u, false); err != nil {
		return nil, fmt.Errorf("inmemory: open: %w", err)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("inmemory: open %q: %w: want mem:// or mem://name", urlopt.Redact(u), ErrInvalidOption)
	}
	q := u.Query()
	o, err := optionsFromQuery(q)
	if err != nil {
		return nil, fmt.Errorf("inmemory: open %q: %w", urlopt.Redact(u), err)
	}
	if u.Host == "" {
		return New(&o)
	}
	return openNamed(u.Host, o, len(q) > 0)
}

// named holds the process-wide brokers of mem://name URLs.
var named = struct {
	sync.Mutex
	m map[string]*broker
}{m: map[string]*broker{}}

func openNamed(name string, o Options, explicit bool) (*Backend, error) {
	opts, err := o.normalize()
	if err != nil {
		return nil, err
	}
	named.Lock()
	defer named.Unlock()
	br := named.m[name]
	if br == nil {
		br = newBroker(opts)
		br.name = name
		named.m[name] = br
	} else if explicit && br.opts != opts {
		return nil, fmt.Errorf("inmemory: open mem://%s: %w: broker already open with max_backlog=%d&max_backlog_bytes=%d&backlog_policy=%v",
			name, ErrInvalidOption, br.opts.MaxBacklog, br.opts.MaxBacklogBytes, br.opts.BacklogPolicy)
	}
	br.users++
	return newHandle(br), nil
}

// releaseBroker drops one user of br and shuts it down with the last.
func releaseBroker(br *broker) {
	if br.name == "" {
		br.shutdown()
		return
	}
	named.Lock()
	br.users--
	last := br.users == 0
	if last {
		delete(named.m, br.name)
	}
	named.Unlock()
	if last {
		br.shutdown()
	}
}
