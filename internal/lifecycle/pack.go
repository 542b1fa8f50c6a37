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
	// HeaderTopic, HeaderGroup and HeaderMember give the topic, group and
	// member of the events of the message whose lines leave them out (the
	// events of one subscription's member are packed together).
	HeaderTopic  = "bus-events-topic"
	HeaderGroup  = "bus-events-group"
	HeaderMember = "bus-events-member"
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

// packer cuts lines of events into messages: reset, add lines, finish.
// It reuses its buffers from one pack to the next and is not safe for
// concurrent use.
type packer struct {
	maxEvents, maxBytes int

	cuts   []cut
	vals   []backend.Message
	ptrs   []*backend.Message
	now    time.Time
	events int // added since reset

	arena lines // what pack encodes
}

// cut is one message's payload, how many events it holds, and what its
// lines leave out (nil: nothing).
type cut struct {
	payload []byte
	n       int
	k       *known
}

// pack encodes evs, and cuts them into messages stamped now (see
// finish). An event whose Time is zero gets the wall time of its Mono
// reading, converted by that of now.
func (p *packer) pack(evs []Event, now time.Time) []*backend.Message {
	nowMono := int64(now.Sub(Epoch))
	p.arena.buf, p.arena.ends = p.arena.buf[:0], p.arena.ends[:0]
	for i := range evs {
		e := &evs[i]
		if e.Time.IsZero() {
			e.Time = now.Add(time.Duration(e.Mono - nowMono))
		}
		p.arena.buf = append(appendEvent(p.arena.buf, e, nil), '\n')
		p.arena.ends = append(p.arena.ends, len(p.arena.buf))
	}
	p.reset(now)
	p.add(&p.arena, 0, len(evs), nil)
	return p.finish()
}

// reset starts new messages stamped now.
func (p *packer) reset(now time.Time) {
	clear(p.cuts) // drop the buffers the last messages referenced
	p.cuts, p.now, p.events = p.cuts[:0], now, 0
}

// add cuts the lines of l from event from on into messages, at most
// most events, and returns where it stopped. The lines leave out what k
// holds (nil: nothing). A message never spans two calls.
func (p *packer) add(l *lines, from, most int, k *known) int {
	to := min(len(l.ends), from+max(most, 0))
	for from < to {
		start := 0
		if from > 0 {
			start = l.ends[from-1]
		}
		// At least one event, then as many as fit.
		end := from + 1
		for end < to && end-from < p.maxEvents && l.ends[end]-start <= p.maxBytes {
			end++
		}
		p.cuts = append(p.cuts, cut{payload: l.buf[start:l.ends[end-1]:l.ends[end-1]], n: end - from, k: k})
		p.events += end - from
		from = end
	}
	return from
}

// finish returns the messages of the events added since reset; they
// hold the buffers of the lines until the next reset.
func (p *packer) finish() []*backend.Message {
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
	for i, c := range p.cuts {
		p.vals[i] = backend.Message{
			ID:          ids[i*36 : (i+1)*36],
			Headers:     headersOf(c),
			Payload:     c.payload,
			PublishedAt: now,
			IDGenerated: true, // never published again: no backend need remember it
		}
		p.ptrs[i] = &p.vals[i]
	}
	return p.ptrs
}

// headersOf returns the headers of the message of c.
func headersOf(c cut) map[string]string {
	h := map[string]string{HeaderCount: strconv.Itoa(c.n), HeaderContentType: ContentType}
	if c.k != nil {
		h[HeaderTopic] = c.k.topic
		if c.k.group != "" {
			h[HeaderGroup] = c.k.group
		}
		if c.k.member != "" {
			h[HeaderMember] = c.k.member
		}
	}
	return h
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
