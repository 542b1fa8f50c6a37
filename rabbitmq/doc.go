// Package rabbitmq is the RabbitMQ backend of the bus, built on
// github.com/rabbitmq/amqp091-go. It needs quorum queues with message
// TTL and at-least-once dead-lettering: RabbitMQ 3.10 is the floor.
//
// Link it in and open it by URL:
//
//	import _ "github.com/eventbus-go/bus/rabbitmq"
//
//	b, err := bus.Open(ctx, "amqp://user:secret@127.0.0.1:5672/vhost")
//
// or with [New] and an [Options] struct.
//
// # URL
//
// amqp:// and amqps:// URLs carry user, password, host, port and virtual
// host as RabbitMQ reads them. Backend parameters are prefix, heartbeat,
// dial_timeout, write_timeout, close_timeout and management (see
// [Options]); an unknown parameter is an error.
//
// # Broker layout
//
//	bus.t.<topic>          durable fanout exchange of a topic
//	bus.q.<topic>/<group>  durable quorum queue of a group, bound to it
//	                       (bus.q.<sha256> when longer than 255 bytes)
//	bus.hold.<ms>          fanout exchange and quorum queue of one fixed
//	                       delay (10 ms to 12 h), shared by every group
//	bus.at.<ms>            fanout exchange and quorum queue of one fixed
//	                       delay for messages published with a DeliverAt
//	bus.lock.<topic>/<group>      exclusive queue of a group lock, on
//	                              a connection of its own
//	bus.lockstate.<topic>/<group> durable queue: how the lock last
//	                              changed hands (released or lapsed)
//	bus.notes.<topic>/<group>     durable quorum queue of a key-ordered
//	                              group's release notes
//	bus.parts.<topic>             stream of the topic's partition count
//	bus.members.<topic>/<group>   stream of a partitioned group's
//	                              heartbeats (kept 10 minutes)
//	bus.result.<topic>/<id>       classic queue of a handler's result
//	bus.due                direct exchange the bus.at queues dead-letter
//	                       to; a topic's exchange is bound to it, with its
//	                       own name as the key, when the topic first
//	                       publishes a DeliverAt
//
// "bus" is Options.Prefix. A hold queue has x-message-ttl of its delay and
// dead-letters (x-dead-letter-strategy at-least-once) through the default
// exchange with the message's routing key, the queue of the group it
// came from. A bus.at queue dead-letters to bus.due with the routing key
// the message was published with, the name of its topic's exchange. A message's ID travels in the message-id property
// (in the AMQP header bus-id when it is longer than the property's 255
// bytes); its key, publish time and headers in the AMQP headers bus-key,
// bus-at and bus-headers (the user headers packed in one byte array, so
// that no user header meets a header the broker sets, and every key and
// value arrives byte-exact); the payload is the body.
//
// # Delivery semantics
//
// At-least-once. Publish writes a batch on a confirm-mode channel, in
// one write to the socket, and returns once the broker confirmed every
// message (the acks of a member go out in one write the same way). A
// message the broker
// nacks is listed in a backend.BatchError, and so is one whose channel
// closed before its confirm came, with an error that says it may be
// stored. A caller whose ctx ends while a channel opens returns at once;
// the connection, which other channels share, is kept, and broken only
// when the broker has not answered within Options.DialTimeout. A
// message published to a topic reaches the groups whose queues exist
// then: a group starts with the messages published after it was created.
//
//   - Receive consumes from the group's queue with a prefetch of
//     MaxInFlight, so the broker never pushes a subscription more
//     unsettled messages than it may run at once, and returns what has
//     arrived, waiting up to a second for the first.
//   - Leases are timers the backend keeps: a delivery not settled within
//     its ack timeout is nacked with requeue, and the broker counts it.
//     Extend restarts the timer. The broker's consumer_timeout is only
//     the safety net for a hung process.
//   - Attempt is 1 + x-delivery-count (the quorum queue's count of
//     earlier deliveries: nacks, leases that ran out, channels closed)
//   - bus-base, the attempts a republished copy carries.
//   - Nack without a delay is a nack with requeue. Nack with a delay,
//     Snooze and Release store a confirmed copy (in the hold queue of the
//     longest fixed delay not past the wait, carrying its due time in
//     bus-due, or at the tail of the group's queue) and then ack the
//     original: a crash in between may duplicate a message, never lose
//     it. A copy that comes back before its due time goes to a hold
//     queue again, so a delay is never cut short and ends at most the
//     shortest hold (10 ms) plus a delivery late. Snooze and Release
//     carry the attempt count, so they do not count one.
//   - An Ack of a delivery whose lease ran out settles the message's newer
//     delivery when this member holds it, or when it comes to this member
//     within ten minutes; a newer delivery on another member is handled
//     again there.
//   - Subscription.Close cancels the consumer and gives what it holds back
//     to the group as confirmed copies, then closes the channel: the
//     deliveries the broker pushed but Receive did not return without
//     counting an attempt, those Receive returned and still unsettled
//     (the bus settles or releases what it drains, so their handler may
//     have run) counting one. A key-ordered member gives them back to the
//     head of the queue instead (see Key order).
//
// # Key order
//
// The backend implements backend.GroupLocker with an exclusive queue per
// group lock, declared on a connection of its own: the lock is held while
// the queue exists. The holder's backend deletes it when the ttl passes
// without a renewal, and the broker deletes it when the connection dies.
// The lockstate queue records whether the lock was last released or
// lapsed: a lock taken after a lapse is a takeover.
//
// A subscription that fetches while a holder of its backend holds its
// group's lock is a key-ordered member. It gives back what it holds to
// the head of the group's queue, in delivery order, without counting an
// attempt: it stores a release note per delivery (the message ID and the
// x-delivery-count the return gives it) in the group's notes queue,
// confirmed, and then closes its channel, and the quorum queue puts the
// channel's unsettled messages back at its head in delivery order,
// counting a delivery each. Release keeps a delivery on the channel with
// a note until the channel closes. A delivery Receive returned that is
// neither settled nor released when the member closes gets no note: its
// handler may have run (the bus's close ran out of time before its ack),
// so its return counts an attempt and the next holder never takes it for
// a first one. The member does so when it closes,
// when a lease runs out (that delivery counts an attempt) and when the
// lock passes on without it closing. The next holder takes the notes
// before its first Receive under the lock and lowers the Attempt of each
// noted delivery by the returns that were releases. A delivery pushed
// in the instant between the notes and the channel's close, and every
// release when the notes cannot be stored, count an attempt; so do the
// releases noted for a holder that dies before it settles them.
//   - Dead letters are published by the bus (a confirmed copy to the
//     dead-letter topic, then the ack). An entry without bus-at (a
//     foreign producer) is malformed: it is dead-lettered when the
//     subscription has a dead-letter topic, acked and reported.
//
// # Partitioned topics
//
// The backend implements backend.Partitioner; partition p of topic T is
// the topic T~p, with an exchange and group queues of its own, and its
// members own it through the group lock (see Key order). The count and
// the members are kept in streams (x-queue-type stream), which every
// reader reads whole without taking anything off: a caller consumes the
// stream, appends a record and reads up to it (reading it back is the
// proof that it is stored), all on one channel. The first count above
// 0 in a topic's parts stream is its count, so that of two callers that
// record different counts at once both read the one that came first; the
// backend keeps a count once read. A heartbeat is a record of the
// member's name and the time it is live until, by the writer's clock (the
// members' clocks are taken to agree); a Leave is a record that ends it.
// A read takes the records of the last ten seconds (or twice the ttl,
// when longer), and the members whose last record is a heartbeat not
// past its time are live.
//
// The streams are declared, written and read on a connection of their
// own, dialed with the publishing connection. RabbitMQ 3.10 answers a stream's declaration before the stream
// has started, and until it has, a publish to it or a consume from it
// closes the channel or crashes the channel's process, which ends the
// whole connection (541 INTERNAL_ERROR): that happens when processes
// subscribe to a fresh partitioned topic at once. A record is therefore
// appended only on a channel whose consume of the stream the broker took,
// and an append or a read that meets a closed channel or connection runs
// again with the same record, for 10 seconds at most, bounded by its
// ctx; a record stored twice reads as once. A count read stops at the
// first count: a topic used before costs one consume.
//
// # Results
//
// The backend implements backend.ResultStore with a classic queue per
// result, holding it as its one message: StoreResult deletes the queue of
// an earlier result of the message, declares it again with x-expires of
// the ttl plus a second and x-max-length 1, and publishes the result with
// the ttl as its expiration, confirmed. Result reads it with basic.get and
// puts it back with a nack, which keeps its expiry; a caller that reads
// while another holds it finds none and the bus looks again. The bus
// stores the result and then acks (there is no ResultAcker: RabbitMQ has
// no step that does both): a crash between the two leaves the result
// stored and the message redelivered, and the next handling's result
// replaces it. A result costs the broker a queue (a process of its own)
// and its message until its ttl, and the queue until it has gone unread
// for its ttl and a second.
//
// # Inspection
//
// The backend implements backend.Inspector through the management API
// (Options.Management, the management URL parameter): Topics lists the
// backend's exchanges, with the publishes into each (publish_in) and the
// messages and bytes of its group queue that holds the most; Groups lists
// the group queues bound to a topic's exchange (none of the backend's
// other queues), with lag (ready messages),
// pending (unacknowledged) and consumers. The figures lag by up to the
// broker's collect_statistics_interval. Without a management URL, Topics
// and Groups return an error wrapping backend.ErrUnsupported; Peek and
// Delete always do, since RabbitMQ reads a queue only by consuming it.
//
// # Retention
//
// A message leaves a group's queue when the group acks it, and a topic
// with no group keeps nothing (its exchange routes to no queue).
// BoundRetention (backend.RetentionBounder, the bus's lifecycle events
// topic) gives every message this backend publishes to the topic without
// a DeliverAt still to come a per-message TTL (the AMQP expiration) of
// the bound's age: a group's queue that stops consuming drops each
// message once it has been in the queue that long, with no subscriber
// running. Equal TTLs keep the oldest message at the head, where the
// broker expires them. The length bound is not applied: queue arguments
// cannot change once declared.
//
// # Deadlines
//
// Every synchronous AMQP method (opening a channel, declaring, consuming)
// runs under its caller's ctx; every write to the socket has a deadline
// (Options.WriteTimeout), and heartbeats (Options.Heartbeat) end a
// connection whose peer went silent. A connection that died is dialed
// again by the next call that needs it; after a failed dial the next
// waits a backoff (25 ms, doubling up to 1 s), and a call whose ctx ends
// before the backoff does returns the last dial's error at once.
// Subscription.Close returns within about Options.CloseTimeout,
// Backend.Close within about twice that.
//
// RabbitMQ 3.10 keeps a quorum queue's Raft state in dets tables that it
// writes to disk later: the term every five seconds, and the directory of
// Raft servers on dets's own schedule. A node killed before a new queue's
// state is on disk brings the queue back empty, as a follower of term 0
// without a leader, and publishes to it are not confirmed until an
// election is triggered on the node. The fault suite's restart case
// kills the node after it synced every dets table.
//
// # Recovery
//
// RabbitMQ 3.10 keeps exchanges, queues and bindings in Mnesia, whose
// transaction log it writes out up to about two seconds late: a node
// killed in that time comes back without the latest declarations, and
// confirms a message published to an exchange that has lost a group's
// binding as routed nowhere. The backend declares again what it relies
// on once a connection was lost:
//
//   - A member declares the topic's exchange, the group's queue and its
//     binding on every channel it consumes on, before basic.consume:
//     sent without waiting for their replies, they share the round trip
//     of basic.qos, which the broker answers after them. A member whose
//     consumer the broker cancelled on a live channel (its group's
//     queue was deleted, see DeleteGroup) declares nothing again, and
//     its Receive fails.
//   - Every other declaration (a topic's exchange for Publish, the hold
//     queues, bus.due and its bindings, release notes) counts for the
//     publishing connection it was made on: the first use after that
//     connection was lost declares it again. A stream is declared at
//     each use.
//   - A Publish the broker refuses (a publish to an exchange that is
//     gone closes the channel, and the batch goes unconfirmed) makes
//     the next Publish declare its exchanges again, on the same
//     connection.
//
// A message published while a group's binding is missing reaches no
// queue of that group: from the node's restart until the group's
// member consumes again.
//
// # Capabilities
//
// ConsumerGroups, Persistent, Redelivery, NackDelay, Ordered (one member
// receives first deliveries in publish order), Extend, Scheduling and
// Results are true. Broadcast is true when the backend has a management
// URL (Options.Management, the management URL parameter): the bus's
// sweep of lapsed broadcast groups lists them through Groups (see
// Inspection). Without one Broadcast is false, and bus.WithBroadcast is
// refused at Subscribe with an error that says to set it
// (Capabilities.BroadcastNeeds).
//
// Publish stores a message whose DeliverAt is still to come in the
// bus.at hold queue of the longest fixed delay not past it, carrying its
// due time in bus-due, so delayed messages never stand in front of
// immediate ones; it reaches the groups its topic has when it comes out
// (also a group created after the Publish), and a group that gets it
// before its due time holds it again as a Snooze does.
//
// StartOldest is false (a group's queue holds only what was published
// after it was declared; Subscribe refuses StartOldest) and PublishDedup
// is false (RabbitMQ keeps no record of message IDs: a retried Publish
// may store a message twice). The backend implements backend.Pinger (a
// channel opened and closed); subscriptions implement backend.Extender,
// Releaser and Snoozer. The backend implements backend.GroupLocker
// (see Key order), backend.Partitioner (see Partitioned topics) and
// backend.GroupDeleter (the group's queue, release notes, lock, lock state
// and members stream deleted; copies of its messages in the shared hold
// queues are dropped when they come out); its subscriptions implement
// backend.PendingLister: a member of a key-ordered group holds deliveries
// only on its live channel, so the list is this process's deliveries,
// complete once the group's queue has no consumer of another process (a
// passive queue.declare counts them); until then PendingDeliveries returns
// an error and the bus asks again. Deliveries waiting in a hold queue are
// not listed. It implements backend.Inspector without Peek and Delete
// (see Inspection), and has no GroupSeeker: the conformance cases of it
// are skipped.
package rabbitmq
