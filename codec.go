package bus

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"
)

// Codec turns a typed topic's values into payloads and back. Encode gets
// a value of the topic's type T; Decode gets a non-nil *T to fill. A
// codec's ContentType travels with every message it encodes, and a typed
// subscription refuses a message whose content type its codec does not
// read (see Topic). Implementations must be safe for concurrent use.
//
// JSON is the default; Raw carries bytes as they are. A codec of a
// format with a library of its own (Protobuf, Avro) lives in a package of
// its own, so that users of JSON do not link that library.
type Codec interface {
	// ContentType is the media type of what Encode returns, such as
	// "application/json" (RFC 2046).
	ContentType() string
	// Encode returns v's payload.
	Encode(v any) ([]byte, error)
	// Decode fills v, a pointer, from data.
	Decode(data []byte, v any) error
}

// ContentTypeReader is an optional interface of a Codec that reads more
// than its own content type: a typed subscription asks it, instead of
// comparing with ContentType, whether it reads a message's content type.
type ContentTypeReader interface {
	ReadsContentType(contentType string) bool
}

// JSON returns the codec of encoding/json, with content type
// "application/json". It is the default codec of NewTopic. It reads any
// JSON media type: "application/json" with or without parameters, and
// "application/<x>+json", except the CloudEvents structured mode's
// "application/cloudevents+json" (the whole event, not a value). A value decodes as json.Unmarshal reads it:
// fields the type lacks are ignored, fields the payload lacks keep their
// zero value.
func JSON() Codec { return jsonCodec{} }

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return "application/json" }

func (jsonCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }

func (jsonCodec) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

func (jsonCodec) ReadsContentType(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt := mediaType(ct)
	if strings.HasPrefix(mt, "application/cloudevents") {
		// A structured-mode CloudEvent: the event's attributes around
		// its data, not a value of the topic's type.
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// Raw returns the codec that carries a topic's bytes as they are, with
// content type "application/octet-stream": a topic of []byte, string or
// json.RawMessage. It reads every content type, so a Raw subscription
// takes any payload. Encode and Decode of any other type return an error.
func Raw() Codec { return rawCodec{} }

type rawCodec struct{}

func (rawCodec) ContentType() string { return "application/octet-stream" }

func (rawCodec) ReadsContentType(string) bool { return true }

func (rawCodec) Encode(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	case json.RawMessage:
		return v, nil
	}
	return nil, fmt.Errorf("raw codec: cannot encode %T (want []byte, string or json.RawMessage)", v)
}

func (rawCodec) Decode(data []byte, v any) error {
	switch v := v.(type) {
	case *[]byte:
		*v = data
	case *string:
		*v = string(data)
	case *json.RawMessage:
		*v = data
	default:
		return fmt.Errorf("raw codec: cannot decode into %T (want *[]byte, *string or *json.RawMessage)", v)
	}
	return nil
}

// readsContentType reports whether c reads messages of content type ct.
// A message without a content type is read by every codec: it decides by
// decoding.
func readsContentType(c Codec, ct string) bool {
	if ct == "" {
		return true
	}
	if r, ok := c.(ContentTypeReader); ok {
		return r.ReadsContentType(ct)
	}
	return mediaType(ct) == mediaType(c.ContentType())
}

// mediaType is ct's media type, lower case, without parameters.
func mediaType(ct string) string {
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}
