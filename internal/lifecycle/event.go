package lifecycle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus/backend"
)

// Kind names a step of a message's life.
type Kind string

// The kinds of events. Their names are the schema: they never change.
const (
	// Received: a delivery reached its member, which is about to run the
	// handler (Attempt says which delivery it is).
	Received Kind = "received"
	// Succeeded: the handler returned nil (Duration is how long it ran).
	Succeeded Kind = "succeeded"
	// Failed: the handler returned an error or panicked (Error, cut to
	// MaxErrorLen; Duration).
	Failed Kind = "failed"
	// RetryScheduled: the delivery was given back to be redelivered after
	// Delay, as a new attempt.
	RetryScheduled Kind = "retry_scheduled"
	// Snoozed: the delivery was given back to be redelivered after Delay,
	// without counting an attempt.
	Snoozed Kind = "snoozed"
	// DeadLettered: the message was moved to the dead-letter topic
	// DeadLetter (or dropped, when dead-lettering is off and DeadLetter is
	// empty), with Code and Error saying why.
	DeadLettered Kind = "dead_lettered"
	// Expired: the message reached its ExpiresAt before it was handled; a
	// DeadLettered event with code "expired" follows.
	Expired Kind = "expired"
	// Replayed: the dead letter was published back to Topic from the
	// dead-letter topic DeadLetter.
	Replayed Kind = "replayed"
	// Scaled: the bus changed the in-flight bound of a member of Topic and
	// Group to Bound, for Reason. MessageID and Key are empty.
	Scaled Kind = "scaled"
)

// MaxErrorLen bounds Event.Error, in bytes; a longer error text is cut at
// a rune boundary and ends with "…".
const MaxErrorLen = 512

// Event is one lifecycle event, one line of a message of the events topic
// (see HeaderCount).
type Event struct {
	Kind Kind      `json:"kind"`
	Time time.Time `json:"time"`
	// MessageID and Key are those of the message the event is about.
	MessageID string `json:"id,omitempty"`
	Key       string `json:"key,omitempty"`
	// Topic and Group are where it was consumed; Member names the
	// subscription (host, process and a random part) that acted.
	Topic  string `json:"topic"`
	Group  string `json:"group,omitempty"`
	Member string `json:"member,omitempty"`
	// Attempt is the delivery's attempt (1 on the first delivery).
	Attempt int `json:"attempt,omitempty"`
	// Duration is how long the handler ran (succeeded, failed).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Delay is when the next delivery comes (retry_scheduled, snoozed).
	Delay time.Duration `json:"delay_ns,omitempty"`
	// Error is the handler's error or the dead-letter reason, cut to
	// MaxErrorLen.
	Error string `json:"error,omitempty"`
	// Code is the dead-letter code (dead_lettered, expired).
	Code string `json:"code,omitempty"`
	// DeadLetter is the dead-letter topic (dead_lettered, replayed).
	DeadLetter string `json:"dead_letter,omitempty"`
	// Bound and Reason describe a scaling decision (scaled).
	Bound  int    `json:"bound,omitempty"`
	Reason string `json:"reason,omitempty"`

	// Mono stands for Time when Time is zero: a reading of the monotonic
	// clock, in nanoseconds since Epoch, which Emit turns into the wall
	// time by the Emitter's reference (renewed at every batch). A
	// handler's path reads the cheaper clock once, for its duration and
	// its events alike.
	Mono int64 `json:"-"`
}

// Epoch is the origin of Event.Mono.
var Epoch = time.Now()

// CutError returns s cut to MaxErrorLen bytes at a rune boundary.
func CutError(s string) string {
	if len(s) <= MaxErrorLen {
		return s
	}
	const ellipsis = "…"
	n := MaxErrorLen - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// Append appends the JSON encoding of e to buf, without reflection or
// allocations: what encoding/json reads back as e (it leaves <, > and &
// unescaped, and writes times with all nine digits of fraction).
func Append(buf []byte, e *Event) []byte { return appendEvent(buf, e, nil) }

// str is a string and its JSON encoding, made once.
type str struct {
	s   string
	enc []byte
}

func mkStr(s string) str { return str{s: s, enc: appendString(nil, s)} }

// known holds the strings that the events of one subscription (a Sink)
// share. Its lines leave out the ones they share, and the messages they
// are packed into carry them in headers (HeaderTopic, HeaderGroup,
// HeaderMember). It is read-only once made: any goroutine may use it.
type known struct{ topic, group, member string }

// kindStrs holds the encodings of the kinds.
var kindStrs = func() []str {
	var out []str
	for _, k := range []Kind{Received, Succeeded, Failed, RetryScheduled, Snoozed, DeadLettered, Expired, Replayed, Scaled} {
		out = append(out, mkStr(string(k)))
	}
	return out
}()

func appendKind(buf []byte, k Kind) []byte {
	for i := range kindStrs {
		if kindStrs[i].s == string(k) {
			return append(buf, kindStrs[i].enc...)
		}
	}
	return appendString(buf, string(k))
}

// appendEvent appends e as Append does, leaving out its topic, group and
// member where they are k's (k nil: none).
func appendEvent(buf []byte, e *Event, k *known) []byte {
	if k == nil {
		k = &known{}
	}
	buf = append(buf, `{"kind":`...)
	buf = appendKind(buf, e.Kind)
	buf = append(buf, `,"time":"`...)
	buf = appendTime(buf, e.Time)
	buf = append(buf, '"')
	buf = appendField(buf, "id", e.MessageID)
	buf = appendField(buf, "key", e.Key)
	if k.topic == "" || e.Topic != k.topic {
		buf = append(buf, `,"topic":`...)
		buf = appendString(buf, e.Topic)
	}
	if e.Group != k.group {
		buf = appendField(buf, "group", e.Group)
	}
	if e.Member != k.member {
		buf = appendField(buf, "member", e.Member)
	}
	buf = appendInt(buf, "attempt", int64(e.Attempt))
	buf = appendInt(buf, "duration_ns", int64(e.Duration))
	buf = appendInt(buf, "delay_ns", int64(e.Delay))
	buf = appendField(buf, "error", e.Error)
	buf = appendField(buf, "code", e.Code)
	buf = appendField(buf, "dead_letter", e.DeadLetter)
	buf = appendInt(buf, "bound", int64(e.Bound))
	buf = appendField(buf, "reason", e.Reason)
	return append(buf, '}')
}

// appendKnown appends line, an event's line that leaves out the topic,
// group and member because they are k's (appendEvent with k, of an event
// with k's topic, group and member), with them: the line as appendEvent
// without k would write it, but for the order of its fields.
func appendKnown(buf, line []byte, k *known) []byte {
	buf = append(buf, '{')
	if k.topic != "" {
		buf = append(buf, `"topic":`...)
		buf = append(appendString(buf, k.topic), ',')
	}
	if k.group != "" {
		buf = append(buf, `"group":`...)
		buf = append(appendString(buf, k.group), ',')
	}
	if k.member != "" {
		buf = append(buf, `"member":`...)
		buf = append(appendString(buf, k.member), ',')
	}
	return append(buf, line[1:]...)
}

// DecodeIn reads one event from a line of a message of the events topic
// whose headers are hdr: the topic, group and member the line leaves out
// are those the headers give.
func DecodeIn(line []byte, hdr map[string]string) (Event, error) {
	e, err := decode(line)
	if err != nil {
		return e, err
	}
	if e.Topic == "" {
		e.Topic = hdr[HeaderTopic]
	}
	if e.Group == "" {
		e.Group = hdr[HeaderGroup]
	}
	if e.Member == "" {
		e.Member = hdr[HeaderMember]
	}
	if e.Topic == "" {
		return Event{}, fmt.Errorf("lifecycle event: no topic")
	}
	return e, nil
}

// Decode reads one event from a line that names its topic (a message of
// the events topic without HeaderTopic, or Append's output).
func Decode(payload []byte) (Event, error) { return DecodeIn(payload, nil) }

func decode(payload []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(payload, &e); err != nil {
		return Event{}, fmt.Errorf("lifecycle event: %w", err)
	}
	if e.Kind == "" {
		return Event{}, fmt.Errorf("lifecycle event: no kind")
	}
	if e.Code != "" {
		e.Code = string(backend.ParseDeadLetterCode(e.Code))
	}
	return e, nil
}

// appendTime appends t as RFC 3339 in UTC with nine digits of fraction
// (time.RFC3339Nano reads it); the date and clock of the last second seen
// are kept, so most events format only the fraction.
func appendTime(buf []byte, t time.Time) []byte {
	t = t.UTC()
	sec := t.Unix()
	p := lastSecond.Load()
	if p == nil || p.sec != sec {
		p = &secondPrefix{sec: sec, text: t.Truncate(time.Second).AppendFormat(nil, "2006-01-02T15:04:05")}
		lastSecond.Store(p)
	}
	buf = append(buf, p.text...)
	ns := t.Nanosecond()
	hi, lo := ns/10000, ns%10000 // 5 and 4 digits
	var frac [10]byte
	frac[0] = '.'
	copy(frac[1:3], digits2[hi/1000*2:])
	copy(frac[3:5], digits2[hi/10%100*2:])
	frac[5] = byte('0' + hi%10)
	copy(frac[6:8], digits2[lo/100*2:])
	copy(frac[8:10], digits2[lo%100*2:])
	buf = append(buf, frac[:]...)
	return append(buf, 'Z')
}

// digits2 holds 00 to 99, two bytes each.
const digits2 = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" + "40414243444546474849" +
	"50515253545556575859" + "60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// secondPrefix is the formatted date and clock of one second.
type secondPrefix struct {
	sec  int64
	text []byte
}

var lastSecond atomic.Pointer[secondPrefix]

func appendField(buf []byte, name, v string) []byte {
	if v == "" {
		return buf
	}
	buf = append(buf, ',', '"')
	buf = append(buf, name...)
	buf = append(buf, '"', ':')
	return appendString(buf, v)
}

func appendInt(buf []byte, name string, v int64) []byte {
	if v == 0 {
		return buf
	}
	buf = append(buf, ',', '"')
	buf = append(buf, name...)
	buf = append(buf, '"', ':')
	return strconv.AppendInt(buf, v, 10)
}

const hexDigits = "0123456789abcdef"

// plain8 reports whether the 8 bytes of s are all plain (see plain),
// testing them at once.
func plain8(s string) bool {
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, b := x^'"'*ones, x^'\\'*ones // a byte is 0 where x has '"' or '\\'
	special := x |                  // not ASCII
		(x-0x20*ones)&^x | // below 0x20
		(q-ones)&^q | (b-ones)&^b
	return special&highs == 0
}

// plain marks the ASCII bytes a JSON string carries as they are.
// encoding/json also escapes <, > and & for HTML; a reader of JSON does
// not need it, and the events are no HTML.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string (invalid UTF-8 becomes U+FFFD,
// as encoding/json writes it).
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	i := 0
	for ; i+8 <= len(s) && plain8(s[i:i+8]); i += 8 {
	}
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			buf = append(buf, s[start:i]...)
			if r == utf8.RuneError {
				buf = append(buf, `\ufffd`...)
			} else {
				buf = append(buf, `\u202`...)
				buf = append(buf, hexDigits[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
