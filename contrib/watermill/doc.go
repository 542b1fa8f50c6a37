// Package watermill is a Watermill (github.com/ThreeDotsLabs/watermill)
// Pub/Sub over a bus.Bus: NewPublisher and NewSubscriber implement
// Watermill's message.Publisher and message.Subscriber, so a Watermill
// router, its middleware and its components run on any backend the bus
// opens by URL, with the bus's retries, dead letters, leases, limiters
// and key ordering underneath. It lives in a module of its own, so that
// the library's go.mod does not list Watermill. docs/watermill.md is the
// guide: moving a router, and what changes in behaviour.
//
// # Mapping
//
// A Watermill message's UUID is the bus message's ID, its metadata the
// headers, its payload the payload, each byte-exact both ways. What a bus
// header cannot carry (a UUID that is not a valid bus ID, metadata keys
// that are not header tokens or use a reserved prefix, values that are
// not UTF-8, entries past the header count) travels in the
// HeaderEncoded header and comes back as it was. PublisherConfig picks
// the bus Key (KeyMetadata or Key) and maps Watermill's delay metadata
// (components/delay) onto DeliverAt.
//
// # Settlement
//
// Ack acks the delivery. Nack fails it: the bus delivers it again after
// its retry backoff and dead-letters it to "<topic>.dlq" at
// SubscriberConfig.MaxDeliveries (10 by default; Unlimited as Watermill's
// own Pub/Subs do). While a message waits for its Ack the bus keeps its
// lease alive; a message whose process died comes back after the ack
// timeout. Subscriber.Close drains like bus.Subscription.Close.
//
// # Watermill's universal suite
//
// The tests run Watermill's tests.TestPubSub on mem://, Redis, NATS
// JetStream, PostgreSQL, RabbitMQ, Kafka and SNS+SQS with these features:
// consumer groups, persistent, order with a single subscriber (but on
// SNS+SQS, whose standard queues do not keep publish order), not exactly
// once. Skipped, and why:
// TestPublishSubscribeInOrder and TestNoAck need GuaranteedOrder (the
// members of a group share its messages without an order unless keyed and
// SubscriberConfig.KeyOrdering is on); TestNewSubscriberReceivesOldMessages
// (a group resumes where it stands); TestReconnect (it needs a command
// that restarts the broker).
//
// # Concurrency
//
// Publisher and Subscriber are safe for concurrent use. Neither owns the
// bus: closing them leaves it open.
package watermill
