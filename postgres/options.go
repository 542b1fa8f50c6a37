package postgres

import (
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// ErrInvalidOption is wrapped by errors about options and URL parameters
// (bus.ErrInvalidOption).
var ErrInvalidOption = backend.ErrInvalidOption

// Retention says which messages the backend deletes from a topic.
type Retention int

const (
	// RetainSettled deletes the messages every group of the topic has
	// settled, never one a group still needs. A topic without groups
	// keeps everything.
	RetainSettled Retention = iota
	// RetainAll never deletes a message.
	RetainAll
)

// Options configures a Backend. The zero value (or nil) is the defaults.
type Options struct {
	// Block is the longest a Receive waits for a message when none is
	// ready (default 1s, at most 1s). A notification or a due time ends
	// the wait earlier; Block is also how often an idle subscription
	// polls when notifications are lost.
	Block time.Duration
	// DedupWindow is how long a caller-set message ID is remembered for
	// idempotent publish (default 2m; negative: off).
	DedupWindow time.Duration
	// MaxPayload is the largest payload Publish accepts (default 64 MiB,
	// at most 512 MiB).
	MaxPayload int
	// Retention is what the trimmer deletes (default RetainSettled).
	Retention Retention
	// TrimInterval is how often a process trims each topic it subscribes
	// or published to, enforces BoundRetention and prunes the dedup
	// window (default 1s).
	TrimInterval time.Duration
	// Channel is the LISTEN/NOTIFY channel (default "bus").
	Channel string
	// SkipMigrate: New does not run Migrate; the schema must exist.
	SkipMigrate bool
}

const (
	defaultBlock        = time.Second
	defaultDedupWindow  = 2 * time.Minute
	defaultMaxPayload   = 64 << 20
	maxMaxPayload       = 512 << 20
	defaultTrimInterval = time.Second
	defaultChannel      = "bus"
)

// withDefaults validates o and fills in the defaults.
func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	switch {
	case r.Block < 0 || r.Block > time.Second:
		return r, fmt.Errorf("%w: Block %v is outside (0, 1s]", ErrInvalidOption, r.Block)
	case r.Block == 0:
		r.Block = defaultBlock
	}
	if r.DedupWindow == 0 {
		r.DedupWindow = defaultDedupWindow
	} else if r.DedupWindow < 0 {
		r.DedupWindow = 0
	}
	switch {
	case r.MaxPayload < 0 || r.MaxPayload > maxMaxPayload:
		return r, fmt.Errorf("%w: MaxPayload %d is outside [0, %d]", ErrInvalidOption, r.MaxPayload, maxMaxPayload)
	case r.MaxPayload == 0:
		r.MaxPayload = defaultMaxPayload
	}
	if r.Retention != RetainSettled && r.Retention != RetainAll {
		return r, fmt.Errorf("%w: unknown Retention %d", ErrInvalidOption, r.Retention)
	}
	switch {
	case r.TrimInterval < 0:
		return r, fmt.Errorf("%w: TrimInterval %v is negative", ErrInvalidOption, r.TrimInterval)
	case r.TrimInterval == 0:
		r.TrimInterval = defaultTrimInterval
	}
	if r.Channel == "" {
		r.Channel = defaultChannel
	}
	if len(r.Channel) > 63 {
		return r, fmt.Errorf("%w: Channel %q is longer than 63 bytes", ErrInvalidOption, r.Channel)
	}
	return r, nil
}
