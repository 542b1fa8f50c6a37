package rabbitmq

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

// AMQP headers the backend writes. User headers travel in one byte
// array (hdrHeaders), so no user header can collide with a header the
// broker sets (x-delivery-count, x-death) and header keys longer than an
// AMQP field name (255 bytes) arrive byte-exact.
const (
	hdrID       = "bus-id"      // message ID, long string, when the message-id property cannot hold it
	hdrKey      = "bus-key"     // message key, long string, absent when empty
	hdrHeaders  = "bus-headers" // user headers, byte array (see encodeHeaders)
	hdrAt       = "bus-at"      // publish time, Unix nanoseconds
	hdrBase     = "bus-base"    // attempts before this copy (release, snooze, nack delay)
	hdrDue      = "bus-due"     // Unix ms before which a held copy goes back to a hold queue
	hdrDelCount = "x-delivery-count"
)

// errMalformed is wrapped by decode errors.
var errMalformed = errors.New("malformed entry")

// encode builds the AMQP message of m.
func encode(m *backend.Message, base int, due int64) amqp.Publishing {
	h := amqp.Table{hdrAt: m.PublishedAt.UnixNano()}
	if m.ID == "" || len(m.ID) > 255 {
		h[hdrID] = m.ID
	}
	if m.Key != "" {
		h[hdrKey] = m.Key
	}
	if len(m.Headers) > 0 {
		h[hdrHeaders] = encodeHeaders(m.Headers)
	}
	if base > 0 {
		h[hdrBase] = int64(base)
	}
	if due > 0 {
		h[hdrDue] = due
	}
	p := amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		Body:         m.Payload, // written out before the publish call returns
	}
	if len(m.ID) <= 255 {
		p.MessageId = m.ID
	}
	return p
}

// encodeHeaders packs h as length-prefixed key and value pairs
// (uvarint lengths), the form the backend reads back byte-exact.
func encodeHeaders(h map[string]string) []byte {
	n := 0
	for k, v := range h {
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	b := make([]byte, 0, n)
	for k, v := range h {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

func decodeHeaders(b []byte) (map[string]string, error) {
	h := map[string]string{}
	for len(b) > 0 {
		var kv [2]string
		for i := range kv {
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return nil, errors.New("bus-headers is truncated")
			}
			kv[i] = string(b[w : w+int(n)])
			b = b[w+int(n):]
		}
		h[kv[0]] = kv[1]
	}
	return h, nil
}

// decoded is a delivery's message plus what the backend carries for
// itself.
type decoded struct {
	msg   backend.Message
	base  int   // attempts before this copy
	count int   // x-delivery-count: the broker's count of earlier deliveries
	due   int64 // Unix ms; 0 when due
}

// decode reads d. A message of the bus carries bus-at, and its ID in
// the message-id property (a short string, byte-exact up to 255 bytes)
// or, when longer, in bus-id; a message without bus-at is not the bus's
// (malformed). Attempt is 1 + the attempts before the copy + the
// broker's count of its earlier deliveries (x-delivery-count of a quorum
// queue).
func decode(d *amqp.Delivery) (decoded, error) {
	var out decoded
	if _, bus := d.Headers[hdrAt]; !bus {
		return out, errMalformed
	}
	id, ok := d.Headers[hdrID].(string)
	if !ok {
		id = d.MessageId
	}
	if id == "" {
		return out, errMalformed
	}
	out.msg.ID = id
	if v, ok := d.Headers[hdrKey]; ok {
		k, ok := v.(string)
		if !ok {
			return out, errors.New("bus-key is not a string")
		}
		out.msg.Key = k
	}
	if v, ok := d.Headers[hdrHeaders]; ok {
		b, ok := v.([]byte)
		if !ok {
			return out, errors.New("bus-headers is not a byte array")
		}
		h, err := decodeHeaders(b)
		if err != nil {
			return out, err
		}
		out.msg.Headers = h
	}
	if at, ok := intHeader(d.Headers, hdrAt); ok {
		out.msg.PublishedAt = time.Unix(0, at)
	}
	base, _ := intHeader(d.Headers, hdrBase)
	count, _ := intHeader(d.Headers, hdrDelCount)
	out.base, out.count = int(base), int(count)
	out.msg.Attempt = 1 + int(base) + int(count)
	out.due, _ = intHeader(d.Headers, hdrDue)
	out.msg.Payload = d.Body
	return out, nil
}

// intHeader reads an integer header of any AMQP integer type.
func intHeader(t amqp.Table, k string) (int64, bool) {
	switch v := t[k].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
