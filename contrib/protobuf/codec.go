package protobuf

import (
	"fmt"
	"mime"
	"reflect"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/eventbus-go/bus"
)

// ContentType is the media type of what the codec encodes.
const ContentType = "application/protobuf"

// Codec returns the Protobuf codec: the binary wire format of a generated
// message, for a bus.Topic of the message's pointer type (Topic[*pb.M]).
// Encoding a nil message, or a value that is not a proto.Message, is an
// error that names the type to declare instead.
func Codec() bus.Codec { return codec{} }

type codec struct{}

var messageType = reflect.TypeFor[proto.Message]()

func (codec) ContentType() string { return ContentType }

// ReadsContentType reports whether ct is a Protobuf media type.
func (codec) ReadsContentType(ct string) bool {
	if ct == ContentType {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch strings.ToLower(mt) {
	case "application/protobuf", "application/x-protobuf", "application/vnd.google.protobuf":
		return true
	}
	return false
}

func (codec) Encode(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, notMessage("encode", reflect.TypeOf(v))
	}
	if rv := reflect.ValueOf(m); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, fmt.Errorf("protobuf codec: cannot encode a nil %T: publish a message, or an empty one (new(%s))", v, rv.Type().Elem())
	}
	return proto.Marshal(m)
}

func (codec) Decode(data []byte, v any) error {
	if m, ok := v.(proto.Message); ok {
		// A pointer to a message value: fill it.
		return proto.Unmarshal(data, m)
	}
	// A pointer to a message pointer (the *T of a Topic[*pb.M]): fill a
	// new message and point at it.
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Type().Elem().Kind() != reflect.Pointer || !rv.Type().Elem().Implements(messageType) {
		return notMessage("decode into", reflect.TypeOf(v))
	}
	m := reflect.New(rv.Type().Elem().Elem())
	if err := proto.Unmarshal(data, m.Interface().(proto.Message)); err != nil {
		return err
	}
	rv.Elem().Set(m)
	return nil
}

// notMessage is the error of a value of type t that is not a message.
func notMessage(what string, t reflect.Type) error {
	if t != nil && t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(messageType) {
		return fmt.Errorf("protobuf codec: cannot %s %s: declare the topic with the message's pointer type, bus.NewTopic[*%s]", what, t, t)
	}
	return fmt.Errorf("protobuf codec: cannot %s %v: not a proto.Message (declare the topic with a generated message's pointer type)", what, t)
}
