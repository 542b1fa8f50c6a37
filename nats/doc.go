// Package nats is the bus backend on NATS: JetStream (the default,
// at-least-once) or core NATS (at-most-once).
//
// Link it in with a blank import and open it by URL, or wrap a connection
// you configured yourself:
//
//	import _ "github.com/eventbus-go/bus/nats"
//	b, err := bus.Open(ctx, "nats://user:pass@127.0.0.1:4222?storage=file")
//
//	be, err := nats.New(nc, &nats.Options{SubjectPrefix: "orders"})
//	b := bus.New(be)
//
// # URLs and connections
//
// The schemes nats://, tls:// and nats+tls:// are registered with
// bus.Register (the last two require TLS). User and password, or a token,
// go in the URL's user part; a creds file, an nkey seed, a CA, a client
// certificate and the TLS server name go in Options or in the query
// (creds, nkey, tls_ca, tls_cert, tls_key, tls_server_name). Every other
// Options field has a query parameter too (see Options); an unknown
// parameter is an error. A connection the backend opens reconnects
// forever (ReconnectWait 250ms), pings every 20s and gives up a link
// after three unanswered pings; disconnects and reconnects go to the
// observer of each subscription (observer.ScopeConnection) and to the
// Logger, always with the URL redacted. nats-server 2.9 is the oldest
// server supported; features of 2.10 (stream compression, stream and
// consumer metadata) are used only when the server reports 2.10 or later.
//
// # Topics, subjects and streams
//
// A topic is published on the subject SubjectPrefix + "." + topic
// ("bus.orders.created" by default). In JetStream mode each topic is
// stored in a stream of its own (StreamPerTopic, the default) or every
// topic in one stream whose subject is SubjectPrefix + ".>"
// (StreamShared). Streams are created on first use (file storage, limits
// retention, one replica unless Options say otherwise) or, with BindOnly,
// must exist already. Limits retention keeps messages until the stream's
// MaxAge, MaxMsgs or MaxBytes whatever the groups settled; interest
// retention has the server drop a message once every group acked it,
// with no subscriber running. BoundRetention (the bus's lifecycle events
// topic) lowers a per-topic stream's max_age and max_msgs, or purges the
// topic's subject of a shared stream to its length every second.
//
// Stream and consumer names may not contain ".", so topics and groups are
// escaped injectively: "." becomes "-", "-" becomes "_h", "_" becomes
// "__", ":" becomes "_c" and the "~" of a partition topic "_p". Topic
// "orders.created" is stored in stream
// "BUS_orders-created"; group "billing" is the durable consumer
// "billing" (in a shared stream: "billing_torders-created"). Names longer
// than 128 bytes are cut and end in a hash of the full name.
//
// Two deployments that share a server and a subject prefix must use the
// same StreamMode: a shared stream's subjects overlap every per-topic
// stream's.
//
// # Delivery semantics
//
// JetStream mode is at-least-once. Publish returns nil only when the
// server stored every message of the batch; batches are published
// asynchronously, at most PublishWindow unacknowledged at a time across
// every concurrent Publish call (a call waits for its own acks only, so
// calls overlap on the wire), and every message carries Nats-Msg-Id = Message.ID, so the server drops a
// republished duplicate within the stream's duplicates window. Headers
// with the Nats- prefix are refused: the server would act on them.
// PublishEach (backend.EachPublisher, used by bus.PublishAsync) reports
// each message stored as soon as its ack arrives, and the failures once
// the batch's wait ends.
//
// Each bus group is a durable pull consumer with explicit acks, AckWait
// = the longest ack timeout its members asked for (a member with a
// shorter one never shortens the others' leases; to shorten a group's,
// delete its consumer), MaxDeliver above the bus's max deliveries (the
// bus dead-letters first; the server's limit is a safety net) and
// MaxAckPending = 2*MaxInFlight + 512 (room for acks in transit). A
// member pulls at most the capacity the bus reserved for one Receive,
// with one request that the server holds for under a second until the
// first message and ends as soon as it delivered what the stream had
// (servers before 2.10 end it with a 408 status, later ones with 404).
// When the server refuses such a request because an older one is still
// open, the member waits for one message and then takes what else is
// there. While messages flow faster than such requests can be answered
// one by one, a member asks instead for what the flow brings in 50 ms,
// with requests that wait up to 100 ms until they are full, the next
// sent as the last fills, as the client library's Consume keeps its
// requests open: a steady flow fills them, and they end without a status
// message. The server hands the open requests of a member one delivery
// each in turn, so the member counts what they owe together, and a
// status message that ends one says what it still owed. Such a request
// that the server neither fills nor ends within 120 ms is taken as ended
// (servers before 2.10 drop one that expires just as a message comes,
// without a status message), and the next Receive asks again. No
// messages are prefetched beyond the capacity the bus reserved, so none
// sits in a buffer while its AckWait runs. A replicated consumer that is
// electing its leader (right after it is made, or when its leader moves)
// answers no pull request, ends those its old leader held with a 409
// status, or leaves one sent as the leader steps down unanswered: the
// member looks the consumer up, with short waits, until it has a leader,
// and the Receive ends with what it has and no error, as long as the
// requests have gone unanswered for less than five seconds; past that,
// the Receive fails. A consumer that the server lost (deleted, or a
// memory stream after a restart) is re-created and reported to the
// observer (observer.ScopeReclaim): on a stream that had to be
// re-created too it starts at the stream's beginning; otherwise right
// after the last message the member received, or at the group's
// StartFrom if it had received none. Deliveries that were unacked when
// the consumer vanished cannot be settled any more; they are delivered
// again only if they come after that point. A pull request that a
// Receive's ctx cut short (the bus closing the member) may still be
// filled by the server: the member waits up to 50 ms for its end (a
// request that waits until it is full, until it expires), or else moves
// to a fresh inbox and drains the old one, and Receive returns what came
// with the ctx's error, for the bus to handle or give back, rather than
// leaving it pending in an inbox nobody reads until AckWait. A member
// that closes while the server may still answer a pull request of its
// (messages of a pull still coming, or, in a cluster, a request it gave
// up on: a server other than the member's may deliver to the old inbox
// until the unsubscribe reaches it) lets its group lock lapse at
// UnlockGroup rather than release it, so that the next member takes it
// over and waits for what is pending.
//
// A pull request answered late is never lost that way. The server counts
// a request's expiry from when it reads the request, so no expiry, however
// short, keeps a paused or overloaded server from delivering after the
// member gave up on the request (its wait plus 250 ms); instead every
// pull request of a member replies to one inbox subscription that lives
// as long as the member, so whatever the server delivers to a request the
// member gave up on lands where the next Receive reads first, in the
// order the server sent it, before anything a newer request brings. What
// arrives beyond what a Receive may take is handed back, in order: each
// is recorded as a release (no handler saw it, so its Attempt stays) and
// nacked with a request for the server's confirmation, which Receive
// waits for, since the server handles acks apart from pull requests and
// an unhandled nack would let the next pull take the messages after them
// first. A redelivered message comes before new ones, so the next pull
// returns them first. The one loss left is the connection itself: what
// the server wrote to a connection that broke is redelivered after
// AckWait, like the deliveries of a member that died (JetStream offers no
// way to re-take deliveries a member never received).
//
// Settling maps onto the JetStream acknowledgement protocol: Ack is +ACK,
// Nack with a delay is -NAK with that delay (the server holds the
// message), Extend is +WPI (in progress, restarting AckWait), and Reject
// or dead-lettering stores a copy in the dead-letter topic's stream and
// then sends +TERM so the original is never delivered again. Attempt is
// the delivery count from the message's metadata, less the deliveries the
// bus released: Release (backend.Releaser, for a delivery whose handler a
// shutdown cancelled) records the release in a key-value bucket of the
// backend's (<StreamPrefix>_RELEASED, keys kept at most seven days) and
// sends -NAK with a delay of about a second, which outlasts the closing
// member's last pull request; a redelivery looks its record up, and
// settling the message deletes it. The consumer's MaxDeliver leaves room
// for 100 released deliveries of one message. Acks are not confirmed
// by the server: a lost ack means a redelivery, never a loss. A member
// that crashes leaves its deliveries pending; the server redelivers them
// to another member after AckWait. Subscriptions do not implement
// backend.PendingLister (JetStream does not tell which deliveries after
// a consumer's ack floor were acked): a key-ordered member that takes the
// group lock over from a crashed one waits 1.5 s and one ack timeout (a
// fetch the crashed member had under way may be handed a message after it
// stopped, leased from then).
//
// Core NATS mode (Options.CoreNATS, ?jetstream=false) is at-most-once.
// Groups are queue groups: every group gets each message, one member of
// the group handles it. Nothing is stored: a message published while no
// member of a group is subscribed is never delivered to that group, and a
// message lost to a crash, a disconnect, a handler error or a slow
// consumer (more than 65536 messages waiting in the client) is gone.
// Publish returns after the server has received the batch (a flush), not
// after anyone handled it.
//
// # Capabilities
//
//	capability      JetStream               core NATS
//	ConsumerGroups  yes (durable consumers) yes (queue groups)
//	Persistent      yes with file storage   no
//	Redelivery      yes                     no
//	NackDelay       yes                     no
//	Ordered         yes (one member)        yes (one member, one publisher)
//	StartOldest     yes                     no
//	Extend          yes                     no
//	Scheduling      yes (not with interest retention) no (DeliverAt is refused)
//	MaxPayload      server max_payload - 64 KiB kept for headers (the largest header block the bus accepts, encoded)
//
// Without Redelivery the bus dead-letters a failed message at once instead
// of retrying it, Nack returns bus.ErrUnsupported, and the conformance
// suite skips the cases that need redelivery, nack delays, leases or
// persistence.
//
// # Partitioned topics
//
// Partition p of a partitioned topic T (bus.Bus.CreateTopic) is the topic
// "T~p": its own subject ("bus.orders~3"), and its own stream with
// StreamPerTopic ("BUS_orders_p3"); every group has a consumer per
// partition. The partition count and each group's live members are keys
// of the key-value bucket <StreamPrefix>_LOCKS, which holds the group
// locks too (backend.Partitioner), so a partitioned topic makes no bucket
// of its own: "parts.<hex topic>" holds the count, written once with
// Create (of two callers recording different counts at once, the first
// wins and both read it), and "members.<hex topic>.<hex group>" the
// members with the time each drops out, replaced with compare-and-set on
// the key's revision; members expire by the writer's clock, as the locks
// do. A member owns a partition while it holds the partition's group lock
// in the same bucket; DeleteTopic of T purges both keys. The bucket is
// made once per Backend; locks, counts and member lists are read from the
// leader of its stream (a replica that is behind would not show what a
// compare-and-set just wrote), and its calls are retried while a
// replicated bucket answers "no responders" (its stream electing a
// leader, or its replicas catching up right after it was made), at most
// ten seconds and never past the caller's deadline. The bucket's stream has the
// streams' replicas; it works on every supported server (2.9 and later:
// no per-key TTL, no stream metadata needed).
//
// # Delayed delivery
//
// A message with a DeliverAt still to come is stored, as published, on
// the subject "<prefix>.~sched.<topic>.due" of the topic's stream (a
// stream made before is given that subject on the first delayed
// publish); the groups' consumers filter on the topic's subject, so they
// never fetch it, and it holds no slot and none of MaxAckPending while it
// waits. Every Backend with a subscription on the topic runs a promoter;
// the one holding the topic's promoter lock (a group lock of the reserved
// group "~promoter" in the locks bucket, three seconds, renewed while it
// runs) reads the schedules with an ordered consumer, keeps their due
// times (and their bodies, up to 64 MiB) and, 20 ms before each is due,
// stores a copy on the topic's subject and deletes the schedule; the
// member holds an early copy until DeliverAt, so no handler runs before
// it. The copy keeps the headers and payload, carries the ID in "bus-id",
// the publish time in "bus-published" and the Nats-Msg-Id of its schedule
// with "#due-<sequence>" appended, so the stream drops a second copy of
// one schedule within its duplicates window. When the promoter's member
// dies, another takes over within four seconds; a message due while no
// member ran is promoted when one starts. This runs on every server
// version (2.9 and later); schedules of the server's own (2.12 and later)
// that an earlier version of this package stored are left to the server.
// A DeliverAt further ahead than MaxAge is refused (ErrInvalidMessage):
// the stream would drop the schedule first. With interest retention, and
// in a bind_only stream without the schedule subject, the message is
// stored at once and the bus gives each early delivery back until it is
// due; MaxMsgs and MaxBytes count schedules as messages.
//
// # Concurrency
//
// A Backend is safe for concurrent use. Close closes the connection only
// when the Backend opened it (Connect, Open, bus.Open).
package nats
