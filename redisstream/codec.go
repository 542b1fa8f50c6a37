package redisstream

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/slab"
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
// is foreign, or a value has the wrong type or encoding. Errors name the
// entry ID, the reserved field concerned and the problem, never a foreign
// field's name nor any value read from the wire: they reach observers,
// logs and dead-letter headers. The reserved
// fields are looked up directly; the map is walked only when the entry has
// more fields than those (headers, or foreign fields).
func decode(id string, values map[string]any, m *backend.Message) error {
	meta, err := stringField(id, values, fieldMeta, true)
	if err != nil {
		return err
	}
	sp := strings.IndexByte(meta, ' ')
	if sp < 0 || sp == len(meta)-1 {
		return fmt.Errorf("%w %s: bad %q field", errMalformed, id, fieldMeta)
	}
	ms, err := strconv.ParseInt(meta[:sp], 10, 64)
	if err != nil {
		return fmt.Errorf("%w %s: bad publish time in %q field", errMalformed, id, fieldMeta)
	}
	m.PublishedAt = time.UnixMilli(ms)
	m.ID = meta[sp+1:]
	payload, err := stringField(id, values, fieldPayload, true)
	if err != nil {
		return err
	}
	m.Payload = []byte(payload)
	known := 2
	if _, ok := values[fieldKey]; ok {
		if m.Key, err = stringField(id, values, fieldKey, false); err != nil {
			return err
		}
		known++
	}
	if len(values) == known {
		return nil
	}
	m.Headers = make(map[string]string, len(values)-known)
	foreign := 0
	for k, raw := range values {
		switch k {
		case fieldMeta, fieldPayload, fieldKey:
			continue
		}
		if !strings.HasPrefix(k, headerPrefix) || len(k) == len(headerPrefix) {
			foreign++
			continue
		}
		v, ok := raw.(string)
		if !ok {
			return fmt.Errorf("%w %s: a header field has type %T", errMalformed, id, raw)
		}
		m.Headers[k[len(headerPrefix):]] = v
	}
	if foreign > 0 {
		return fmt.Errorf("%w %s: %d foreign fields (of %d)", errMalformed, id, foreign, len(values))
	}
	return nil
}

// stringField returns the string value of a field.
func stringField(id string, values map[string]any, name string, required bool) (string, error) {
	raw, ok := values[name]
	if !ok {
		if required {
			return "", fmt.Errorf("%w %s: missing %q field (%d fields)", errMalformed, id, name, len(values))
		}
		return "", nil
	}
	v, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%w %s: field %q has type %T", errMalformed, id, name, raw)
	}
	return v, nil
}

// decodeFields decodes the raw fields of an entry the way decode does, in
// one pass and without a field map. It handles what the bus writes: a
// meta field with a plain decimal time, a payload, optionally a key and
// headers, each field once. It sets every field of m but the ID, which it
// returns (pointing into fs) for the caller to copy. For anything else (a
// field missing, foreign, repeated or unusual) it returns false, leaving
// m partly set, and the caller decodes the field map with decode, which
// accepts or refuses the entry with its canonical error. When it returns
// true, decode of the same fields gives the same message. The payload is
// copied into payloads (nil: an allocation of its own).
func decodeFields(fs []rawField, m *backend.Message, payloads *slab.Bytes) (id []byte, ok bool) {
	var meta, payload, key []byte
	haveMeta, havePayload, haveKey := false, false, false
	headers := 0
	for _, f := range fs {
		switch string(f.name) {
		case fieldMeta:
			if haveMeta {
				return nil, false
			}
			meta, haveMeta = f.value, true
		case fieldPayload:
			if havePayload {
				return nil, false
			}
			payload, havePayload = f.value, true
		case fieldKey:
			if haveKey {
				return nil, false
			}
			key, haveKey = f.value, true
		default:
			if len(f.name) <= len(headerPrefix) || string(f.name[:len(headerPrefix)]) != headerPrefix {
				return nil, false
			}
			headers++
		}
	}
	if !haveMeta || !havePayload {
		return nil, false
	}
	sp, ms, ok := parseMeta(meta)
	if !ok {
		return nil, false
	}
	m.PublishedAt = time.UnixMilli(ms)
	m.Payload = payloads.Copy(payload)
	if haveKey {
		m.Key = string(key)
	}
	if headers > 0 {
		m.Headers = make(map[string]string, headers)
		for _, f := range fs {
			if len(f.name) <= len(headerPrefix) || string(f.name[:len(headerPrefix)]) != headerPrefix {
				continue
			}
			k := string(f.name[len(headerPrefix):])
			if _, dup := m.Headers[k]; dup {
				return nil, false
			}
			m.Headers[k] = string(f.value)
		}
	}
	return meta[sp+1:], true
}

// parseMeta reads the meta field "<publish time, Unix ms> <message ID>":
// the position of the space and the time.
func parseMeta(meta []byte) (sp int, ms int64, ok bool) {
	sp = bytes.IndexByte(meta, ' ')
	if sp < 1 || sp > 18 || sp == len(meta)-1 {
		return 0, 0, false
	}
	for _, c := range meta[:sp] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		ms = ms*10 + int64(c-'0')
	}
	return sp, ms, true
}

// newPayloadSlab returns a slab for the payloads of one read's entries:
// room for the value of each entry's payload field (the bus's own entries
// have one), so the read's payloads share one allocation.
func newPayloadSlab(entries []rawEntry, fields []rawField) *slab.Bytes {
	size := 0
	for _, e := range entries {
		for _, f := range fields[e.start:e.end] {
			if string(f.name) == fieldPayload {
				size += len(f.value)
			}
		}
	}
	return slab.New(size)
}
