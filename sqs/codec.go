package sqs

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus/backend"
)

// attrEnvelope names the one message attribute the backend writes: a
// String attribute holding, in standard base64, a binary envelope with
// the message's ID, key, headers, publish time and how the body carries
// the payload. One attribute, so that SQS's limit of ten attributes a
// message never binds the headers; a String one, since Binary attributes
// sent through SNS break the emulator the tests run on.
const attrEnvelope = "bus"

// envelopeVersion is the first byte of every envelope.
const envelopeVersion = 1

// Body encodings: how the body carries the payload.
const (
	bodyText   = 't' // the body is the payload: UTF-8 text SQS carries unchanged
	bodyBase64 = 'b' // the body is the payload in standard base64
	bodyEmpty  = 'e' // the payload is empty; the body is a placeholder
)

// emptyBody is the body of an empty payload: SNS and SQS refuse an empty
// body.
const emptyBody = "-"

// Size bounds. SNS and SQS take messages up to 256 KiB, body and
// attributes added up; a PublishBatch call takes 256 KiB for all its
// entries. The payload bound keeps every message the bus accepts (ID,
// key and headers within backend's content rule) inside the limit even
// when its payload travels in base64.
const (
	maxMessageBytes = 256 << 10
	maxBatchEntries = 10
	// envelopeRoom bounds an envelope: backend.MaxIDLen + MaxKeyLen +
	// MaxHeaderBytes with their length prefixes, and the fixed fields.
	envelopeRoom = 20 << 10
	// maxPayload is the largest payload whose base64 body fits beside
	// the largest envelope, itself in base64.
	maxPayload = 170 << 10
)

// encoded is a message as it goes to SNS.
type encoded struct {
	body     string
	envelope string // base64
	// group and dedup are the MessageGroupId and MessageDeduplicationId
	// of a message to a FIFO topic (see fifoIDs); empty on standard ones.
	group, dedup string
}

// size is what the message counts towards SNS's limits.
func (e encoded) size() int { return len(e.body) + len(attrEnvelope) + len("String") + len(e.envelope) }

// encode builds the SNS body and envelope of m.
func encode(m *backend.Message) encoded {
	var enc byte
	var body string
	switch {
	case len(m.Payload) == 0:
		enc, body = bodyEmpty, emptyBody
	case isCarriedText(m.Payload):
		enc, body = bodyText, string(m.Payload)
	default:
		enc, body = bodyBase64, base64.StdEncoding.EncodeToString(m.Payload)
	}
	n := 2 + binary.MaxVarintLen64 + 3*binary.MaxVarintLen64 + len(m.ID) + len(m.Key)
	for k, v := range m.Headers {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := make([]byte, 0, n)
	b = append(b, envelopeVersion, enc)
	b = binary.AppendVarint(b, m.PublishedAt.UnixNano())
	b = appendString(b, m.ID)
	b = appendString(b, m.Key)
	b = binary.AppendUvarint(b, uint64(len(m.Headers)))
	for k, v := range m.Headers {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	return encoded{body: body, envelope: base64.StdEncoding.EncodeToString(b)}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// isCarriedText reports whether p is UTF-8 text that SQS carries
// unchanged: its allowed characters (#x9, #xA and #x20 and above, less
// #xFFFE and #xFFFF), with no carriage return, which an XML reply may
// normalise.
func isCarriedText(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		switch {
		case r == '\t' || r == '\n':
		case r < 0x20, r == 0xFFFE, r == 0xFFFF:
			return false
		}
	}
	return true
}

var errMalformed = errors.New("malformed envelope")

// decode reads the base64 envelope and the body of a received message
// into m.
func decode(envelope64, body string, m *backend.Message) error {
	envelope, err := base64.StdEncoding.DecodeString(envelope64)
	if err != nil {
		return fmt.Errorf("%w: not base64", errMalformed)
	}
	if len(envelope) < 2 || envelope[0] != envelopeVersion {
		return fmt.Errorf("%w: unknown version", errMalformed)
	}
	enc := envelope[1]
	r := envelope[2:]
	at, n := binary.Varint(r)
	if n <= 0 {
		return fmt.Errorf("%w: publish time", errMalformed)
	}
	r = r[n:]
	var id, key string
	var ok bool
	if id, r, ok = readString(r); !ok || id == "" {
		return fmt.Errorf("%w: message ID", errMalformed)
	}
	if key, r, ok = readString(r); !ok {
		return fmt.Errorf("%w: key", errMalformed)
	}
	count, n := binary.Uvarint(r)
	if n <= 0 || count > backend.MaxHeaders {
		return fmt.Errorf("%w: header count", errMalformed)
	}
	r = r[n:]
	var headers map[string]string
	if count > 0 {
		headers = make(map[string]string, count)
	}
	for range count {
		var k, v string
		if k, r, ok = readString(r); !ok {
			return fmt.Errorf("%w: header key", errMalformed)
		}
		if v, r, ok = readString(r); !ok {
			return fmt.Errorf("%w: header value", errMalformed)
		}
		headers[k] = v
	}
	if len(r) != 0 {
		return fmt.Errorf("%w: trailing bytes", errMalformed)
	}
	var payload []byte
	switch enc {
	case bodyEmpty:
		payload = []byte{}
	case bodyText:
		payload = []byte(body)
	case bodyBase64:
		p, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return fmt.Errorf("%w: base64 body", errMalformed)
		}
		payload = p
	default:
		return fmt.Errorf("%w: body encoding", errMalformed)
	}
	*m = backend.Message{ID: id, Key: key, Headers: headers, Payload: payload, PublishedAt: time.Unix(0, at)}
	return nil
}

func readString(r []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)-k) {
		return "", r, false
	}
	r = r[k:]
	return string(r[:n]), r[n:], true
}
