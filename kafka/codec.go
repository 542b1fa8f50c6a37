package kafka

import (
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/backend"
)

// Record headers the backend writes. Their prefix is the backend's own:
// the bus's headers (bus-deliver-at, bus-dlq-...) and the user's travel as
// record headers of their own name, byte-exact.
const (
	hdrPrefix = "bus-kafka-"
	hdrID     = hdrPrefix + "id" // message ID
	hdrAt     = hdrPrefix + "at" // publish time, Unix nanoseconds, decimal
)

// encode builds the record of m: the key is the message key (none when
// empty), so that Kafka's partitioner keeps a key in one partition.
func encode(topic string, m *backend.Message) *kgo.Record {
	r := &kgo.Record{Topic: topic, Value: append([]byte{}, m.Payload...)}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+2)
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: hdrID, Value: []byte(m.ID)},
		kgo.RecordHeader{Key: hdrAt, Value: strconv.AppendInt(nil, m.PublishedAt.UnixNano(), 10)})
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if !m.PublishedAt.IsZero() {
		r.Timestamp = m.PublishedAt
	}
	return r
}

// decode reads r into m. A record without the backend's ID header comes
// from a producer outside the bus: its ID is "<partition>-<offset>", its
// headers are all the record's headers and its publish time the record's
// timestamp.
func decode(r *kgo.Record, m *backend.Message) {
	*m = backend.Message{Key: string(r.Key), Payload: r.Value, PublishedAt: r.Timestamp}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	for _, h := range r.Headers {
		switch {
		case h.Key == hdrID:
			m.ID = string(h.Value)
		case h.Key == hdrAt:
			if n, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				m.PublishedAt = time.Unix(0, n)
			}
		case strings.HasPrefix(h.Key, hdrPrefix):
		default:
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(r.Headers))
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	if m.ID == "" {
		m.ID = strconv.FormatInt(int64(r.Partition), 10) + "-" + strconv.FormatInt(r.Offset, 10)
	}
}
