// Package sqs is the SNS+SQS backend of the bus (aws-sdk-go-v2): a topic
// is an SNS topic, a consumer group an SQS queue subscribed to it with
// raw message delivery.
//
// Open it with bus.Open and an sqs:// URL (see OpenURL), or with New and
// Options:
//
//	sqs://eu-west-1
//	sqs://us-east-1?endpoint=http://127.0.0.1:5000&prefix=myapp-
//	sqs://eu-west-1?fifo=true
//
// Credentials come from the AWS SDK's default chain (environment, shared
// files, container and instance roles) or Options.Credentials, never from
// the URL; no error or log names them.
//
// # Topics and groups
//
// Publish creates the topic's SNS topic on first use (CreateTopic is
// idempotent) and sends messages with PublishBatch, ten messages and 256
// KiB a call at most, the calls of one Publish concurrently. Subscribe
// creates the group's SQS queue, gives it the policy that lets the topic
// send to it, and subscribes it with RawMessageDelivery. Names are the
// bus's with characters AWS refuses replaced and, when a name had to
// change or is too long, a hash of the bus name appended.
//
// # Message content
//
// The ID, key, headers and publish time travel in one String message
// attribute, "bus", holding a base64 envelope, so that SQS's ten
// attributes a message never bound the headers. The payload is the body
// when it is text SQS carries unchanged (UTF-8, no control character but
// tab and newline) and base64 otherwise; an empty payload has a
// placeholder body. SNS and SQS take 256 KiB a message: the payload limit
// (Capabilities.MaxPayload, 170 KiB) keeps every message the bus accepts
// within it, base64 included. A message without the envelope was not
// written by the bus: it is dead-lettered with code malformed (when the
// subscription has a dead-letter topic), deleted and reported to the
// observer.
//
// # Delivery semantics
//
// At least once. Receive is ReceiveMessage: at most ten messages, waiting
// up to a second. The lease is the visibility timeout: each receive asks
// for the subscription's ack timeout rounded up to whole seconds, so a
// lease is never shorter than asked and ends up to a second later. Ack is
// DeleteMessageBatch; a receipt handle SQS no longer knows is a message
// already deleted, so Ack is idempotent. Extend is ChangeMessageVisibility
// with the lease again; Nack with a delay is ChangeMessageVisibility with
// the delay rounded up to whole seconds, never early. SQS ends a
// message's visibility at most twelve hours after the receive that
// handed it out: a longer nack delay is cut to what is left of them.
// Attempt is SQS's ApproximateReceiveCount, plus, on a copy that
// Release or Snooze sent, the attempts counted before it.
//
// On standard queues a subscription gives a delivery back without
// counting an attempt (backend.Releaser, backend.Snoozer: a shutdown,
// Delivery.Snooze, a message received before its DeliverAt): it sends
// the queue a copy of the message with SendMessage, delayed by the
// snooze (whole seconds, rounded up; DelaySeconds), carrying in a
// "bus-counted" attribute the attempts counted so far, then deletes the
// delivery. A crash between the two leaves both copies, never neither.
// SQS delays a message by 15 minutes at most ("Amazon SQS delay
// queues", SQS Developer Guide): a longer snooze returns
// backend.ErrSnoozeLimit and the bus nacks, which counts. FIFO queues
// give nothing back uncounted: a copy would go behind the later messages
// of its group, and a FIFO queue takes no per-message delay.
//
// A ReceiveMessage runs on its own, bounded by the backend's life: when
// the Receive that started it returns first (its ctx ended, the
// subscription closed), whatever it still hands out is made visible
// again at once with ChangeMessageVisibilityBatch, so no message waits a
// lease for a member that left; its next receive counts one more.
// Backend.Close cancels those requests and waits for them within
// Options.CloseTimeout. A long poll whose client went away may still
// hand out a message that arrives before it ends (the emulator does):
// such a message returns after its lease, the subscription's ack
// timeout. Setup requests (creating a topic or a queue, its
// policy, the subscription) are idempotent and are tried up to three
// times when they fail with no answer from AWS. Publish is never
// repeated: a failed PublishBatch fails its messages, which may have
// been stored (the caller's retry, with the same IDs, may deliver a
// message twice on a standard topic; a FIFO topic deduplicates it).
// Receives and settlements are repeated once, at once, only when the
// connection closed under them while the answer was being read: a
// receive then hands its messages out again after their lease (on a
// FIFO queue at once, by its receive request attempt ID), a deletion or
// a visibility change acts on the same receipt handle. A release's
// copies are never sent twice.
//
// SQS accepts a receipt handle that a newer receive superseded (the
// emulator the tests run on does, for ChangeMessageVisibility and
// DeleteMessage), so the backend keeps each delivery's lease end locally:
// Nack and Extend of a delivery whose lease ended, or that was settled,
// return an error wrapping backend.ErrStale before any request. The
// visibility changes of one delivery go to SQS one at a time: an Extend
// that the bus's keep-alive started while the delivery is nacked either
// has its answer before the Nack is sent or finds the delivery settled,
// so it never hides a message the Nack made visible. (The emulator the
// tests run on changes the visibility of a message that is not in
// flight, and then hands out the later messages of its FIFO message
// group while it is hidden; for AWS, ChangeMessageVisibility of such a
// message is the error MessageNotInflight, SQS API Reference.)
//
// Standard queues do not keep publish order and may deliver a message
// twice; the bus's dead letters, max deliveries and retries are its own,
// with no redrive policy on the queues, on standard and FIFO queues
// alike.
//
// # FIFO topics
//
// With Options.FIFO (the URL parameter fifo=true) every topic is an SNS
// FIFO topic (its name ends in ".fifo") and every group an SQS FIFO
// queue subscribed to it. A message's MessageGroupId is its key, or its
// ID when it has none, so that keyless messages never wait for each
// other; its MessageDeduplicationId is its ID. A key or ID that AWS
// would refuse as such (over 128 characters, or a character that is not
// printable ASCII) travels as "~" and its hex SHA-256. The batches of
// one Publish go one after another, and the first that fails fails the
// rest unsent, so no later message of a key is stored ahead of an
// earlier one. The backend relies on these behaviours of AWS:
//
//   - Messages of one message group are received in the order they were
//     sent, and while a message of a group is in flight (received, not
//     deleted, its visibility timeout not ended) no receive returns
//     another message of that group; one receive may return several
//     messages of a group, in order. ("FIFO queue delivery logic in
//     Amazon SQS" and "Using the message group ID with Amazon SQS FIFO
//     queues", SQS Developer Guide.) That is the per-key order the bus
//     needs across members (Capabilities.KeyOwnership): the member that
//     received a key's messages holds the key until it deletes them or
//     makes them visible again (a nack, a give-back at Close), and a
//     member that died loses its keys when their visibility timeouts,
//     the subscription's ack timeout, end. A nack or an ended lease puts
//     a message back ahead of the later messages of its group.
//   - A message published again with a MessageDeduplicationId already
//     accepted within the five-minute deduplication interval is accepted
//     and not delivered (SNS API Reference, PublishBatchRequestEntry;
//     "Exactly-once processing in Amazon SQS", SQS Developer Guide):
//     Capabilities.PublishDedup, with a window of five minutes and no
//     memory of the backend's own.
//   - An SNS FIFO topic delivers to SQS FIFO queues with the message
//     group and deduplication IDs it was given ("Message ordering and
//     deduplication (FIFO topics)", SNS Developer Guide).
//   - ChangeMessageVisibility works on FIFO queues as on standard ones.
//
// AWS orders messages of different groups in no promised way: FIFO
// topics do not declare Ordered. A FIFO queue in AWS allows 300
// transactions a second without high throughput mode, and looks for
// available groups among the first 20,000 messages only ("Amazon SQS
// FIFO queue quotas"); the emulator has neither limit.
//
// # Inspection
//
// The backend implements backend.Inspector from what SNS and SQS tell
// about topics and queues. It tags each SNS topic it uses with its bus
// topic ("bus-topic", TagResource after CreateTopic) and each group's
// queue with its bus topic and group ("bus-topic", "bus-group",
// TagQueue after CreateQueue), characters a tag value may not hold
// written "@" and two hex digits, so that names hashed to fit AWS map
// back exactly. Tagging is best effort: a topic or queue it could not
// tag (no sns:TagResource or sqs:TagQueue permission) works as any
// other and is inspected as an untagged one.
//
// Topics lists the SNS topics of the backend's prefix and kind (FIFO
// topics with Options.FIFO, standard ones otherwise) under the names of
// their tags. An untagged topic (made by a build before the tags, and
// not used since: the backend tags a topic it publishes to or
// subscribes on) is listed under its AWS name, without the prefix and
// ".fifo", when that is exactly the AWS name the backend gives that bus
// name; one whose AWS name was hashed is skipped. With no prefix, an
// account's other untagged SNS topics of such names are listed too: a
// prefix keeps applications apart. An SNS topic stores nothing and SNS
// counts nothing a request can read: Messages, Bytes, Published and
// Scheduled are Unknown.
//
// Groups lists the queues subscribed to the topic whose tags name the
// topic (and untagged ones whose names are the backend's unhashed name
// for a group of the topic), by group. From the queue's attributes, Lag
// is ApproximateNumberOfMessages plus ApproximateNumberOfMessagesDelayed
// (copies a release or a snooze sent with DelaySeconds), and Pending
// ApproximateNumberOfMessagesNotVisible (received, neither deleted nor
// visible again). Consumers is Unknown: SQS does not know who receives.
// These figures are approximate: AWS computes them eventually
// consistently ("the ApproximateNumberOfMessagesDelayed,
// ApproximateNumberOfMessagesNotVisible, and ApproximateNumberOfMessages
// metrics may not achieve consistency until at least 1 minute after the
// producers stop sending messages", GetQueueAttributes, SQS API
// Reference); the emulator reports them exactly.
//
// Peek and Delete return an error wrapping backend.ErrUnsupported: SQS
// reads a message only by receiving it, which counts a receive and hides
// the message from the group. So the bus cannot list, replay or purge
// dead letters on SQS (Bus.DeadLetters and the others return
// ErrUnsupported), and Bus.Topics marks no topic as holding dead
// letters.
//
// # Deadlines
//
// The requests of a call run under the call's ctx, which ends them over
// a dead network too. A ReceiveMessage, and the give-back of what it
// handed out late, run on their own (see above): the Receive returns when
// its ctx ends or the subscription closes, and Backend.Close ends the
// requests. Subscription.Close returns at once. Backend.Close
// cancels the requests still running and returns within
// Options.CloseTimeout. Each HTTP request is also bounded by
// Options.RequestTimeout (default 30s), so a call whose ctx has no
// deadline returns on a dead network too.
//
// # Capabilities
//
// ConsumerGroups, Persistent, Redelivery, NackDelay and Extend; with
// FIFO topics also KeyOwnership and PublishDedup. Absent: Ordered (SQS
// orders only within a message group), StartOldest (a new queue receives
// what SNS publishes after it is subscribed; Subscribe refuses
// StartOldest with backend.ErrUnsupported), PublishDedup on standard
// topics (they do not deduplicate), KeyOwnership on standard queues
// (they keep no order: run key-ordered subscriptions on FIFO topics),
// Scheduling (SNS takes no per-message delay; the bus snoozes early
// deliveries, uncounted on standard queues up to 15 minutes at a time),
// Broadcast and Results. On FIFO topics a release or a snooze counts as
// an attempt. Of backend.Inspector, Topics and Groups work; Peek and
// Delete are unsupported (see Inspection), and there is no
// backend.TopicDeleter or backend.GroupSeeker.
package sqs
