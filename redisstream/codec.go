package redisstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Entry fields. Reserved fields are short lower-case names without a colon;
// every user header is stored under headerPrefix + name, so a header can
// never overwrite a reserved field whatever its name.
const (
	fieldMeta    = "m"   // "<publish time, Unix ms> <message ID>"
	fieldKey     = "key" // only when the message has a key
	fieldPayload = "p"
	headerPrefix = "h:"
)

// errMalformed is wrapped by every decode error.
var errMalformed = errors.New("malformed entry")

// appendMeta appends the value of the meta field of m to buf.
func appendMeta(buf []byte, m *backend.Message) []byte {
	buf = strconv.AppendInt(buf, m.PublishedAt.UnixMilli(), 10)
	buf = append(buf, ' ')
	return append(buf, m.ID...)
}

// metaSize bounds the length of the meta field of m.
func metaSize(m *backend.Message) int { return 21 + len(m.ID) }

// appendFields appends the stream fields of m to dst, payload last, with
// meta as the value of the meta field. Values are passed as []byte where
// possible so they are written without a copy.
func appendFields(dst []any, m *backend.Message, meta []byte) []any {
	dst = append(dst, fieldMeta, meta)
	if m.Key != "" {
		dst = append(dst, fieldKey, m.Key)
	}
	for k, v := range m.Headers {
		dst = append(dst, headerPrefix+k, v)
	}
	return append(dst, fieldPayload, m.Payload)
}

// fieldCount returns how many values appendFields adds for m.
func fieldCount(m *backend.Message) int {
	n := 4 + 2*len(m.Headers)
	if m.Key != "" {
		n += 2
	}
	return n
}

// decode turns the fields of a stream entry into a message. It fails, with
// an error wrapping errMalformed, when a reserved field is missing, a field
// is foreign, or a value has the wrong type or encoding.
func decode(id string, values map[string]any, m *backend.Message) error {
	var haveMeta, havePayload bool
	nh := 0
	for k := range values {
		if strings.HasPrefix(k, headerPrefix) {
			nh++
		}
	}
	if nh > 0 {
		m.Headers = make(map[string]string, nh)
	}
	for k, raw := range values {
		v, ok := raw.(string)
		if !ok {
			return fmt.Errorf("%w %s: field %q has type %T", errMalformed, id, k, raw)
		}
		switch k {
		case fieldMeta:
			sp := strings.IndexByte(v, ' ')
			if sp < 0 || sp == len(v)-1 {
				return fmt.Errorf("%w %s: bad %q field", errMalformed, id, fieldMeta)
			}
			ms, err := strconv.ParseInt(v[:sp], 10, 64)
			if err != nil {
				return fmt.Errorf("%w %s: bad time in %q field: %w", errMalformed, id, fieldMeta, err)
			}
			m.PublishedAt = time.UnixMilli(ms)
			m.ID, haveMeta = v[sp+1:], true
		case fieldKey:
			m.Key = v
		case fieldPayload:
			m.Payload, havePayload = []byte(v), true
		default:
			if !strings.HasPrefix(k, headerPrefix) || len(k) == len(headerPrefix) {
				return fmt.Errorf("%w %s: foreign field %q", errMalformed, id, k)
			}
			m.Headers[k[len(headerPrefix):]] = v
		}
	}
	if !haveMeta {
		return fmt.Errorf("%w %s: missing %q field", errMalformed, id, fieldMeta)
	}
	if !havePayload {
		return fmt.Errorf("%w %s: missing %q field", errMalformed, id, fieldPayload)
	}
	return nil
}
