package watermill

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventbus-go/bus"
)

// HeaderEncoded is the header that carries what a bus header cannot:
// the UUID when it is not a valid bus message ID, and the metadata entries
// whose key is not a valid header key (or is HeaderEncoded itself) or
// whose value is not valid UTF-8. Its value is a JSON object whose bytes
// are base64: {"uuid": "...", "metadata": [["key", "value"], ...]}. The
// Subscriber removes it and restores the entries.
const HeaderEncoded = "Watermill-Encoded"

// directHeaders is how many metadata entries go into headers of their
// own; the others are encoded. Three headers stay free: HeaderEncoded and
// the two the bus uses for DeliverAt and ExpiresAt.
const directHeaders = bus.MaxHeaders - 3

// encoded is the value of HeaderEncoded. UUID is nil when the UUID is the
// message ID.
type encoded struct {
	UUID     []byte      `json:"uuid,omitempty"`
	HasUUID  bool        `json:"has_uuid,omitempty"`
	Metadata [][2][]byte `json:"metadata,omitempty"`
}

// toBus maps a Watermill message onto a bus message: UUID to ID, metadata
// to headers, payload to payload, each byte-exact; the key and the
// delivery time as the config picks them.
func (c *PublisherConfig) toBus(msg *message.Message) (*bus.Message, error) {
	if msg == nil {
		return nil, fmt.Errorf("%w: nil message", bus.ErrInvalidMessage)
	}
	m := &bus.Message{Payload: msg.Payload}
	var enc encoded
	if validID(msg.UUID) {
		m.ID = msg.UUID
	} else {
		enc.UUID, enc.HasUUID = []byte(msg.UUID), true
	}
	if len(msg.Metadata) > 0 {
		m.Headers = make(map[string]string, min(len(msg.Metadata), directHeaders)+1)
	}
	for k, v := range msg.Metadata {
		if len(m.Headers) < directHeaders && validHeaderKey(k) && utf8.ValidString(v) {
			m.Headers[k] = v
			continue
		}
		enc.Metadata = append(enc.Metadata, [2][]byte{[]byte(k), []byte(v)})
	}
	if enc.HasUUID || enc.Metadata != nil {
		b, err := json.Marshal(enc)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %s: %v", bus.ErrInvalidMessage, HeaderEncoded, err)
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, 1)
		}
		m.Headers[HeaderEncoded] = string(b)
	}
	if c.Key != nil {
		m.Key = c.Key(msg)
	} else if c.KeyMetadata != "" {
		m.Key = msg.Metadata.Get(c.KeyMetadata)
	}
	if !c.IgnoreDelay {
		if s := msg.Metadata.Get(delay.DelayedUntilKey); s != "" {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, fmt.Errorf("%w: metadata %s: %v", bus.ErrInvalidMessage, delay.DelayedUntilKey, err)
			}
			m.DeliverAt = at
		}
	}
	return m, nil
}

// fromBus maps a delivery back onto a Watermill message: the inverse of
// toBus. Headers the bus sets on dead letters arrive as metadata.
func fromBus(d *bus.Delivery) (*message.Message, error) {
	uuid := d.ID
	md := make(message.Metadata, len(d.Headers))
	for k, v := range d.Headers {
		if k != HeaderEncoded {
			md[k] = v
		}
	}
	if s, ok := d.Headers[HeaderEncoded]; ok {
		var enc encoded
		if err := json.Unmarshal([]byte(s), &enc); err != nil {
			return nil, fmt.Errorf("watermill: message %q: header %s: %w", d.ID, HeaderEncoded, err)
		}
		if enc.HasUUID {
			uuid = string(enc.UUID)
		}
		for _, kv := range enc.Metadata {
			md[string(kv[0])] = string(kv[1])
		}
	}
	msg := message.NewMessage(uuid, d.Payload)
	msg.Metadata = md
	return msg, nil
}

// validID reports whether id is a valid bus message ID (see bus.Message).
func validID(id string) bool {
	if id == "" || len(id) > bus.MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// validHeaderKey reports whether k is a valid bus header key that the
// adapter carries as it is (see bus.Message).
func validHeaderKey(k string) bool {
	if k == "" || len(k) > bus.MaxHeaderKeyLen || k == HeaderEncoded {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return false
		}
	}
	for _, p := range bus.ReservedHeaderPrefixes {
		if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c is an RFC 9110 token character.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
