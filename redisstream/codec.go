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
	fieldID      = "id"
	fieldTime    = "ts" // publish time, Unix milliseconds
	fieldKey     = "key"
	fieldPayload = "p"
	headerPrefix = "h:"
)

// errMalformed is wrapped by every decode error.
var errMalformed = errors.New("malformed entry")

// appendFields appends the stream fields of m to dst, payload last. The
// payload is passed as []byte so it is written without a copy.
func appendFields(dst []any, m *backend.Message) []any {
	dst = append(dst, fieldID, m.ID, fieldTime, strconv.FormatInt(m.PublishedAt.UnixMilli(), 10))
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
	n := 6 + 2*len(m.Headers)
	if m.Key != "" {
		n += 2
	}
	return n
}

// decode turns the fields of a stream entry into a message. It fails, with
// an error wrapping errMalformed, when a reserved field is missing, a field
// is foreign, or a value has the wrong type or encoding.
func decode(id string, values map[string]any, m *backend.Message) error {
	var haveID, havePayload bool
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
		case fieldID:
			if v == "" {
				return fmt.Errorf("%w %s: empty %q field", errMalformed, id, fieldID)
			}
			m.ID, haveID = v, true
		case fieldTime:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w %s: bad %q field: %w", errMalformed, id, fieldTime, err)
			}
			m.PublishedAt = time.UnixMilli(ms)
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
	if !haveID {
		return fmt.Errorf("%w %s: missing %q field", errMalformed, id, fieldID)
	}
	if !havePayload {
		return fmt.Errorf("%w %s: missing %q field", errMalformed, id, fieldPayload)
	}
	return nil
}
