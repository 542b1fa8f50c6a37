// Package protobuf is the Protobuf codec of bus's typed topics. It lives
// in a module of its own, so that users of JSON do not link
// google.golang.org/protobuf.
//
// Declare a topic with the pointer type of a generated message:
//
//	var OrderPaid = bus.NewTopic[*orderpb.OrderPaid]("orders.paid",
//		bus.WithCodec(protobuf.Codec()), bus.WithEventType("orders.v1.OrderPaid"))
//
// Encode writes the binary wire format (proto.Marshal); Decode reads it
// into a new message of the topic's type (proto.Unmarshal), keeping the
// fields the type does not know as unknown fields, so that a consumer
// that re-publishes an event passes on what a newer producer added. The
// content type is "application/protobuf"; a subscription also reads
// "application/x-protobuf" and "application/vnd.google.protobuf", and
// dead-letters every other content type with code undecodable (see
// bus.Topic), as it does a payload that is not a valid encoding of the
// type.
//
// Protobuf payloads carry no type name: two message types whose fields
// agree by number and wire type decode each other's bytes. Name the
// event type with bus.WithEventType (for example the message's full
// name), so that a bus.Router tells the types apart.
package protobuf
