package nats

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus/backend"
)

// Headers the backend writes next to the user's headers.
const (
	// hdrMsgID carries Message.ID; JetStream deduplicates on it.
	hdrMsgID = "Nats-Msg-Id"
	// hdrKey carries Message.Key.
	hdrKey = "bus-key"
	// hdrID carries Message.ID on the copy of a schedule (promote.go),
	// whose Nats-Msg-Id is the schedule's own, and on the copy a server
	// schedule stores, which has none; it wins over Nats-Msg-Id.
	hdrID = "bus-id"
	// hdrPublished carries PublishedAt (Unix nanoseconds) in core mode;
	// JetStream deliveries use the stream's timestamp instead.
	hdrPublished = "bus-published"
	// hdrStatus and hdrDescription are how the client library exposes the
	// status line of server control messages.
	hdrStatus      = "Status"
	hdrDescription = "Description"
	// hdrPendingMsgs is how many messages a pull request that a status
	// message ends still owed.
	hdrPendingMsgs = "Nats-Pending-Messages"
)

// isNATSHeader reports whether k uses the "Nats-" prefix that the server
// interprets; users may not set such headers.
func isNATSHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "nats-")
}

// Wire encoding. Everything Publish accepts must arrive byte-exact, but the
// NATS header block trims the spaces around a value and cannot carry CR or
// LF, and the client library reads a header named Status or Description
// on an empty message as a server status line. So:
//   - a value that the header block would alter (empty, surrounding
//     spaces or tabs, control characters) is sent as standard base64, and
//     its wire key is listed in the hdrEncoded header;
//   - a user header named Status or Description (any case) is sent under
//     hdrEscaped + its name. User keys cannot start with "bus-", so no
//     user key is ever mistaken for one of these.
//
// Plain values, which is nearly all of them, cost nothing.
const (
	hdrEncoded = "bus-b64"
	hdrEscaped = "bus-h-"
)

// needsEncoding reports whether the NATS header block would alter v.
func needsEncoding(v string) bool {
	if v == "" {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return true
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return true
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// wireKey is the key a user header travels under.
func wireKey(k string) string {
	if strings.EqualFold(k, hdrStatus) || strings.EqualFold(k, hdrDescription) {
		return hdrEscaped + k
	}
	return k
}

// replayedHeader is backend.HeaderReplayed: a replayed dead letter
// carries it.
const replayedHeader = backend.HeaderReplayed

// encode builds the NATS message for m on subject. It refuses headers with
// the Nats- prefix: the server would act on them (expected stream,
// rollups, TTLs ...). idScope is put before the ID in Nats-Msg-Id, so that
// deduplication in a stream shared by several topics stays per topic; a
// replayed dead letter adds its replay time, so that the server does not
// take the replay for a duplicate of the original publish.
func encode(subject string, m *backend.Message, core bool, idScope string) (*natsgo.Msg, error) {
	n := len(m.Headers) + 2
	if m.Key != "" {
		n++
	}
	if core {
		n++
	}
	// The message and the backing array of every header value share one
	// allocation when the headers are few, which is the common case.
	w := &wireMsg{}
	vals := w.vals[:0]
	if n > len(w.vals) {
		vals = make([]string, 0, n)
	}
	h := make(natsgo.Header, n)
	var encoded []string
	set := func(k, v string) {
		if needsEncoding(v) {
			v = base64.StdEncoding.EncodeToString([]byte(v))
			encoded = append(encoded, k)
		}
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for k, v := range m.Headers {
		if isNATSHeader(k) {
			return nil, fmt.Errorf("%w: header %q uses the reserved prefix \"nats-\"", backend.ErrInvalidMessage, k)
		}
		if k == hdrKey || k == hdrPublished || k == hdrEncoded || k == hdrID {
			return nil, fmt.Errorf("%w: header %q is reserved by the nats backend", backend.ErrInvalidMessage, k)
		}
		set(wireKey(k), v)
	}
	msgID := idScope + m.ID
	if r := m.Headers[replayedHeader]; r != "" {
		msgID += "#replay-" + r
	}
	vals = append(vals, msgID)
	h[hdrMsgID] = vals[len(vals)-1 : len(vals) : len(vals)]
	if m.Key != "" {
		set(hdrKey, m.Key)
	}
	if core && !m.PublishedAt.IsZero() {
		set(hdrPublished, strconv.FormatInt(m.PublishedAt.UnixNano(), 10))
	}
	if len(encoded) > 0 {
		h[hdrEncoded] = []string{strings.Join(encoded, ",")}
	}
	w.msg = natsgo.Msg{Subject: subject, Header: h, Data: m.Payload}
	return &w.msg, nil
}

// wireMsg is a message on the wire with room for the values of its
// headers (the ID, and the key or a user header).
type wireMsg struct {
	msg  natsgo.Msg
	vals [3]string
}

// decodeHeaders fills ID, Key, Headers and (in core mode) PublishedAt of
// out from the NATS headers, removing idScope from the ID and undoing the
// wire encoding.
func decodeHeaders(h natsgo.Header, out *backend.Message, idScope string) {
	if len(h) == 1 {
		// Most messages carry their ID alone.
		if vs := h[hdrMsgID]; len(vs) > 0 {
			out.ID = wireID(vs[0], idScope)
			return
		}
	}
	var encoded map[string]bool
	if list := h[hdrEncoded]; len(list) > 0 && list[0] != "" {
		encoded = make(map[string]bool)
		for k := range strings.SplitSeq(list[0], ",") {
			encoded[k] = true
		}
	}
	value := func(k, v string) string {
		if encoded[k] {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				return string(b)
			}
		}
		return v
	}
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		switch {
		case k == hdrMsgID:
			out.ID = wireID(vs[0], idScope)
		case k == hdrKey:
			out.Key = value(k, vs[0])
		case k == hdrID:
			// Read after the loop: it wins over Nats-Msg-Id.
		case k == hdrPublished:
			if ns, err := strconv.ParseInt(vs[0], 10, 64); err == nil {
				out.PublishedAt = time.Unix(0, ns)
			}
		case k == hdrEncoded, isNATSHeader(k):
			// Wire bookkeeping and server metadata, not the user's.
		default:
			if out.Headers == nil {
				out.Headers = make(map[string]string, len(h))
			}
			uk := k
			if strings.HasPrefix(k, hdrEscaped) {
				uk = k[len(hdrEscaped):]
			}
			out.Headers[uk] = value(k, vs[0])
		}
	}
	if vs := h[hdrID]; len(vs) > 0 && vs[0] != "" {
		out.ID = vs[0]
	}
}

// wireID is the message ID in Nats-Msg-Id value v: without idScope and
// without the replay suffix of a replayed dead letter.
func wireID(v, idScope string) string {
	v = strings.TrimPrefix(v, idScope)
	if strings.IndexByte(v, '#') < 0 {
		return v
	}
	if i := strings.Index(v, "#replay-"); i >= 0 {
		v = v[:i]
	}
	return v
}

// isJSDelivery reports whether msg is a message stored in a stream: only
// those carry a JetStream ack subject as their reply. Server status
// messages (no messages, timeouts, heartbeats) do not, whatever their
// headers say, so a user header never makes a message look like one.
func isJSDelivery(msg *natsgo.Msg) bool {
	return strings.HasPrefix(msg.Reply, "$JS.ACK.")
}

// ackMeta is what a JetStream ack subject tells about a delivery:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> or,
// from newer servers, $JS.ACK.<domain>.<account>.<stream>.<consumer>.
// <delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>].
type ackMeta struct {
	stream    string
	delivered int
	streamSeq uint64
	timestamp time.Time
}

func parseAckSubject(reply string) (ackMeta, error) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return ackMeta{}, errors.New("its reply subject is not a JetStream ack subject")
	}
	if m, ok := parseAckV1(rest); ok {
		return m, nil
	}
	return parseAckTokens(rest)
}

// parseAckTokens parses rest, an ack subject after "$JS.ACK.", in either
// form, token by token.
func parseAckTokens(rest string) (ackMeta, error) {
	// Find the dots that end the first eight tokens, without allocating.
	// Six dots make the first form, eight or more the second.
	var dots [8]int
	k := 0
	for off := 0; k < len(dots); k++ {
		i := strings.IndexByte(rest[off:], '.')
		if i < 0 {
			break
		}
		dots[k] = off + i
		off += i + 1
	}
	first := 0 // the index of the stream's token
	switch {
	case k == 6:
	case k == 8:
		first = 2
	default:
		return ackMeta{}, fmt.Errorf("its ack subject has %d tokens", k+3)
	}
	tok := func(i int) string {
		start := 0
		if i > 0 {
			start = dots[i-1] + 1
		}
		if i < k {
			return rest[start:dots[i]]
		}
		return rest[start:]
	}
	delivered, ok1 := decimal(tok(first+2), math.MaxInt)
	sseq, ok2 := decimal(tok(first+3), math.MaxUint64)
	ts, ok3 := decimal(tok(first+5), math.MaxInt64)
	if !ok1 || !ok2 || !ok3 {
		return ackMeta{}, errors.New("its ack subject has malformed numbers")
	}
	return ackMeta{stream: tok(first), delivered: int(delivered), streamSeq: sseq, timestamp: time.Unix(0, int64(ts))}, nil
}

// parseAckV1 parses rest, an ack subject after "$JS.ACK.", in the first
// form, <stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>,
// which is what servers send a consumer of their own account, in one
// pass over the numbers. It reports false for anything else (the second
// form, malformed or 20-digit numbers), which parseAckSubject then reads
// token by token.
func parseAckV1(rest string) (ackMeta, bool) {
	if strings.Count(rest, ".") != 6 {
		return ackMeta{}, false
	}
	stream := strings.IndexByte(rest, '.')
	consumer := stream + 1 + strings.IndexByte(rest[stream+1:], '.')
	i := consumer + 1
	delivered, i, ok1 := ackNumber(rest, i)
	sseq, i, ok2 := ackNumber(rest, i)
	_, i, ok3 := ackNumber(rest, i) // cseq
	ts, _, ok4 := ackNumber(rest, i)
	if !ok1 || !ok2 || !ok3 || !ok4 || delivered > math.MaxInt || ts > math.MaxInt64 {
		return ackMeta{}, false
	}
	return ackMeta{stream: rest[:stream], delivered: int(delivered), streamSeq: sseq, timestamp: time.Unix(0, int64(ts))}, true
}

// ackNumber reads the token of 1 to 19 decimal digits at s[i:], which
// ends at a dot, and returns it with the index past that dot.
func ackNumber(s string, i int) (v uint64, next int, ok bool) {
	start := i
	for ; i < len(s); i++ {
		c := s[i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + uint64(c)
	}
	if n := i - start; n == 0 || n > 19 || i >= len(s) || s[i] != '.' {
		return 0, 0, false
	}
	return v, i + 1, true
}

// decimal parses s, 1 to 20 decimal digits without a sign, as a number
// of at most limit.
func decimal(s string, limit uint64) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	if len(s) == 20 {
		// Beyond what 19 digits hold, and may overflow.
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil && s[0] != '+' && v <= limit
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i] - '0'
		if c > 9 {
			return 0, false
		}
		v = v*10 + uint64(c)
	}
	return v, v <= limit
}
