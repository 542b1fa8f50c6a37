package bus

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// CloudEventsBinding is a CloudEvents protocol binding whose binary
// content mode a Topic writes and reads: the attributes in headers, the
// event data as the payload. Use the binding of the transport the
// events cross on their way to or from systems outside bus.
type CloudEventsBinding string

// The bindings a Topic writes and reads (CloudEvents 1.0).
const (
	// CloudEventsKafka is the Kafka protocol binding: attribute a in
	// header "ce_a", datacontenttype in "content-type", values as they
	// are (UTF-8).
	CloudEventsKafka CloudEventsBinding = "kafka"
	// CloudEventsNATS is the NATS protocol binding: attribute a in header
	// "ce-a", datacontenttype in "ce-datacontenttype", values
	// percent-encoded.
	CloudEventsNATS CloudEventsBinding = "nats"
	// CloudEventsHTTP is the HTTP protocol binding: attribute a in header
	// "ce-a", datacontenttype in "Content-Type", values percent-encoded.
	CloudEventsHTTP CloudEventsBinding = "http"
)

// CloudEventsSpecVersion is the specversion a Topic writes and reads.
const CloudEventsSpecVersion = "1.0"

// CloudEvents configures a topic's CloudEvents attributes (see
// WithCloudEvents).
type CloudEvents struct {
	// Binding chooses the header names and value encoding.
	Binding CloudEventsBinding
	// Source is the source attribute of the events the topic publishes,
	// a URI-reference such as "/orders/api" or "urn:example:orders".
	Source string
}

// WithCloudEvents makes a topic write and read CloudEvents attributes in
// the binary content mode of ce.Binding, instead of HeaderContentType and
// HeaderEventType: id is the message ID (assigned on publish when empty),
// type the topic's event type, source ce.Source, specversion "1.0", time
// the publish time (RFC 3339, UTC), and datacontenttype the codec's
// content type. A typed subscription of the topic reads the type and
// datacontenttype a CloudEvents producer outside bus wrote in that
// binding, and a consumer outside bus reads what the topic publishes. An
// unknown binding or an empty source is refused with an error wrapping
// ErrInvalidOption.
func WithCloudEvents(ce CloudEvents) TopicOption {
	return topicOptionFunc(func(o *topicOptions) error {
		switch ce.Binding {
		case CloudEventsKafka, CloudEventsNATS, CloudEventsHTTP:
		default:
			return fmt.Errorf("%w: CloudEvents binding %q (want %q, %q or %q)", ErrInvalidOption, string(ce.Binding), CloudEventsKafka, CloudEventsNATS, CloudEventsHTTP)
		}
		if ce.Source == "" || !utf8.ValidString(ce.Source) {
			return fmt.Errorf("%w: CloudEvents source %q: want a non-empty URI-reference", ErrInvalidOption, ce.Source)
		}
		o.ce = &ce
		return nil
	})
}

// Header returns the header that carries CloudEvents attribute attr in
// binding b: "ce_id" for attribute "id" in Kafka, "ce-id" in NATS and
// HTTP; datacontenttype is "content-type" in Kafka and "Content-Type" in
// HTTP.
func (b CloudEventsBinding) Header(attr string) string {
	switch {
	case b == CloudEventsKafka && attr == "datacontenttype":
		return "content-type"
	case b == CloudEventsHTTP && attr == "datacontenttype":
		return "Content-Type"
	case b == CloudEventsKafka:
		return "ce_" + attr
	}
	return "ce-" + attr
}

// encodes reports whether b percent-encodes attribute values.
func (b CloudEventsBinding) encodes() bool { return b != CloudEventsKafka }

// Attribute returns CloudEvents attribute attr of headers h written in
// binding b, decoded (percent-decoding for NATS and HTTP), and whether h
// has it. Header names are compared without case when no header has the
// exact name, as NATS and HTTP header names are case-insensitive.
func (b CloudEventsBinding) Attribute(h map[string]string, attr string) (string, bool) {
	v, ok := lookupHeader(h, b.Header(attr))
	if !ok {
		return "", false
	}
	if b.encodes() {
		d, err := percentDecode(unquote(v))
		if err != nil {
			return "", false
		}
		v = d
	}
	return v, true
}

// write sets the CloudEvents attributes of one event in h.
func (c *CloudEvents) write(h map[string]string, id, typ, contentType string, at time.Time) {
	b := c.Binding
	set := func(attr, v string) {
		if b.encodes() {
			v = percentEncode(v)
		}
		h[b.Header(attr)] = v
	}
	set("specversion", CloudEventsSpecVersion)
	set("id", id)
	set("source", c.Source)
	set("type", typ)
	set("time", at.UTC().Format(time.RFC3339Nano))
	if b == CloudEventsNATS {
		set("datacontenttype", contentType)
	} else {
		// Content-Type is the transport's own header: a media type, not
		// percent-encoded.
		h[b.Header("datacontenttype")] = contentType
	}
}

// lookupHeader returns h[key], or the value of a key equal to it without
// case.
func lookupHeader(h map[string]string, key string) (string, bool) {
	if v, ok := h[key]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

// percentEncode encodes s as the CloudEvents HTTP and NATS bindings
// prescribe: space, double quote, percent and every byte outside
// printable ASCII as %XY.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	sb.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		} else {
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

func needsEscape(c byte) bool { return c <= 0x20 || c == '"' || c == '%' || c >= 0x7f }

// percentDecode undoes percentEncode, accepting lower-case hex; what does
// not decode to valid UTF-8 is an error.
func percentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated percent-encoding in %q", s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("bad percent-encoding in %q", s)
		}
		sb.WriteByte(hi<<4 | lo)
		i += 2
	}
	out := sb.String()
	if !utf8.ValidString(out) {
		return "", fmt.Errorf("percent-encoding of %q is not valid UTF-8", s)
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unquote removes the double quotes (and backslash escapes) of an RFC
// 7230 quoted string, which earlier versions of the bindings allowed.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var sb strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' && i+1 < len(s)-1 {
			i++
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}
