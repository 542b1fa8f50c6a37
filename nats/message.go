package nats

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// Headers the backend writes next to the user's headers.
const (
	// hdrMsgID carries Message.ID; JetStream deduplicates on it.
	hdrMsgID = "Nats-Msg-Id"
	// hdrKey carries Message.Key.
	hdrKey = "bus-key"
	// hdrPublished carries PublishedAt (Unix nanoseconds) in core mode;
	// JetStream deliveries use the stream's timestamp instead.
	hdrPublished = "bus-published"
	// hdrStatus and hdrDescription are how the client library exposes the
	// status line of server control messages.
	hdrStatus      = "Status"
	hdrDescription = "Description"
)

// isNATSHeader reports whether k uses the "Nats-" prefix that the server
// interprets; users may not set such headers.
func isNATSHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "nats-")
}

// encode builds the NATS message for m on subject. It refuses headers with
// the Nats- prefix: the server would act on them (expected stream,
// rollups, TTLs ...). idScope is put before the ID in Nats-Msg-Id, so that
// deduplication in a stream shared by several topics stays per topic.
func encode(subject string, m *backend.Message, core bool, idScope string) (*natsgo.Msg, error) {
	n := len(m.Headers) + 1
	if m.Key != "" {
		n++
	}
	if core {
		n++
	}
	// One backing array for every header value: one allocation, not one
	// per header.
	vals := make([]string, 0, n)
	h := make(natsgo.Header, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for k, v := range m.Headers {
		if isNATSHeader(k) {
			return nil, fmt.Errorf("%w: header %q uses the reserved prefix \"nats-\"", bus.ErrInvalidMessage, k)
		}
		if k == hdrKey || k == hdrPublished {
			return nil, fmt.Errorf("%w: header %q is reserved by the nats backend", bus.ErrInvalidMessage, k)
		}
		set(k, v)
	}
	set(hdrMsgID, idScope+m.ID)
	if m.Key != "" {
		set(hdrKey, m.Key)
	}
	if core && !m.PublishedAt.IsZero() {
		set(hdrPublished, strconv.FormatInt(m.PublishedAt.UnixNano(), 10))
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: m.Payload}, nil
}

// decodeHeaders fills ID, Key, Headers and (in core mode) PublishedAt of
// out from the NATS headers, removing idScope from the ID.
func decodeHeaders(h natsgo.Header, out *backend.Message, idScope string) {
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		switch {
		case k == hdrMsgID:
			out.ID = vs[0]
			if idScope != "" {
				out.ID = strings.TrimPrefix(out.ID, idScope)
			}
		case k == hdrKey:
			out.Key = vs[0]
		case k == hdrPublished:
			if ns, err := strconv.ParseInt(vs[0], 10, 64); err == nil {
				out.PublishedAt = time.Unix(0, ns)
			}
		case isNATSHeader(k):
			// Server metadata, not the user's.
		default:
			if out.Headers == nil {
				out.Headers = make(map[string]string, len(h))
			}
			out.Headers[k] = vs[0]
		}
	}
}

// isStatus reports whether msg is a server control message (no payload, a
// status line) rather than a stored message.
func isStatus(msg *natsgo.Msg) bool {
	return len(msg.Data) == 0 && msg.Header != nil && msg.Header.Get(hdrStatus) != ""
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
		return ackMeta{}, fmt.Errorf("reply subject %q is not a JetStream ack subject", reply)
	}
	// Split without allocating: this runs once per delivered message.
	var toks [12]string
	n := 0
	for n < len(toks) {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			toks[n] = rest
			n++
			break
		}
		toks[n], rest = rest[:i], rest[i+1:]
		n++
	}
	t := toks[:n]
	switch {
	case n == 7:
	case n >= 9:
		t = t[2:]
	default:
		return ackMeta{}, fmt.Errorf("ack subject %q has %d tokens", reply, n+2)
	}
	delivered, err1 := strconv.Atoi(t[2])
	sseq, err2 := strconv.ParseUint(t[3], 10, 64)
	ts, err3 := strconv.ParseInt(t[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return ackMeta{}, fmt.Errorf("ack subject %q has malformed numbers", reply)
	}
	return ackMeta{stream: t[0], delivered: delivered, streamSeq: sseq, timestamp: time.Unix(0, ts)}, nil
}
