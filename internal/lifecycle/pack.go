package lifecycle

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

// The format of a message of the events topic: JSON Lines, one event
// object (Append) per line, each line ending in '\n'.
const (
	// HeaderCount is the header that holds how many events the message
	// carries, in decimal.
	HeaderCount = "bus-events"
	// HeaderContentType is the header that names the payload's format,
	// ContentType.
	HeaderContentType = "content-type"
	ContentType       = "application/x-ndjson"
	// MaxPackEvents and MaxPackBytes bound one message: it holds at most
	// MaxPackEvents events, and no more bytes than MaxPackBytes unless a
	// single event is longer (that event gets a message of its own).
	MaxPackEvents = 256
	MaxPackBytes  = 64 << 10
)

// packer encodes events into messages of JSON Lines: reset, add each
// event, finish. It reuses its buffers from one pack to the next and is
// not safe for concurrent use.
type packer struct {
	maxEvents, maxBytes int

	enc      caches
	arena    []byte
	cuts     []cut
	vals     []backend.Message
	ptrs     []*backend.Message
	now      time.Time
	nowMono  int64
	start, n int // the message being filled: where it starts, its events
}

// cut is where one message ends in the arena, and how many events it
// holds.
type cut struct{ end, n int }

// pack encodes evs into messages stamped now, and returns them (see
// finish).
func (p *packer) pack(evs []Event, now time.Time) []*backend.Message {
	p.reset(now)
	for i := range evs {
		p.add(&evs[i])
	}
	return p.finish()
}

// reset starts new messages stamped now.
func (p *packer) reset(now time.Time) {
	p.arena, p.cuts = p.arena[:0], p.cuts[:0]
	p.now, p.nowMono = now, int64(now.Sub(Epoch))
	p.start, p.n = 0, 0
}

// add encodes e. An event whose Time is zero gets the wall time of its
// Mono reading, converted by that of now.
func (p *packer) add(e *Event) {
	if e.Time.IsZero() {
		e.Time = p.now.Add(time.Duration(e.Mono - p.nowMono))
	}
	before := len(p.arena)
	p.arena = append(appendEvent(p.arena, e, &p.enc), '\n')
	if p.n > 0 && (p.n == p.maxEvents || len(p.arena)-p.start > p.maxBytes) {
		// The message is full: it ends before this event.
		p.cuts = append(p.cuts, cut{end: before, n: p.n})
		p.start, p.n = before, 0
	}
	p.n++
}

// finish returns the messages of the events added since reset; they
// hold the packer's buffers until its next reset.
func (p *packer) finish() []*backend.Message {
	if p.n > 0 {
		p.cuts = append(p.cuts, cut{end: len(p.arena), n: p.n})
		p.n = 0
	}
	return p.messages(p.now)
}

// messages makes one message per cut of the arena.
func (p *packer) messages(now time.Time) []*backend.Message {
	k := len(p.cuts)
	if cap(p.vals) < k {
		p.vals = make([]backend.Message, k)
		p.ptrs = make([]*backend.Message, k)
	}
	p.vals, p.ptrs = p.vals[:k], p.ptrs[:k]
	ids := msgid.Batch(k)
	start := 0
	for i, c := range p.cuts {
		p.vals[i] = backend.Message{
			ID:          ids[i*36 : (i+1)*36],
			Headers:     map[string]string{HeaderCount: strconv.Itoa(c.n), HeaderContentType: ContentType},
			Payload:     p.arena[start:c.end:c.end],
			PublishedAt: now,
		}
		p.ptrs[i] = &p.vals[i]
		start = c.end
	}
	return p.ptrs
}

// eachLine calls f with each line of payload that is not empty, until f
// returns false; it reports whether f never did. A payload of one event
// without a newline is one line.
func eachLine(payload []byte, f func(line []byte) bool) bool {
	for len(payload) > 0 {
		line := payload
		if i := bytes.IndexByte(payload, '\n'); i >= 0 {
			line, payload = payload[:i], payload[i+1:]
		} else {
			payload = nil
		}
		if len(line) > 0 && !f(line) {
			return false
		}
	}
	return true
}

// lost is how many events of the last pack err, the error of its
// publish, says were not stored: those of the messages a
// backend.BatchError names, or all.
func (p *packer) lost(err error) int {
	var be *backend.BatchError
	all := 0
	for _, c := range p.cuts {
		all += c.n
	}
	if !errors.As(err, &be) {
		return all
	}
	lost := 0
	for _, f := range be.Failed {
		if f.Index >= 0 && f.Index < len(p.cuts) {
			lost += p.cuts[f.Index].n
		}
	}
	return lost
}
