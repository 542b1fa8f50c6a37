// Package kafka is the Kafka backend of the bus, built on
// github.com/twmb/franz-go (kgo, kadm). It is tested against Apache Kafka
// 4.4 in KRaft mode; it uses the classic consumer group protocol and no
// transactions, so any broker of the last years serves it.
//
// Link it in and open it by URL:
//
//	import _ "github.com/eventbus-go/bus/kafka"
//
//	b, err := bus.Open(ctx, "kafka://127.0.0.1:9092,127.0.0.1:9093")
//
// or with [New] and an [Options] struct.
//
// # URL
//
// The hosts of a kafka:// URL are the seed brokers; a user and password
// in it go with sasl. Parameters: tls, tls_server_name, sasl (plain,
// scram-sha-256, scram-sha-512), client_id, dial_timeout,
// request_timeout, session_timeout, close_timeout and partitions (see
// [Options] and [OpenURL]); an unknown parameter is an error, found
// before any I/O. Options.Dial, which has no URL form, sends every
// connection through a dialer of the caller's (a proxy, say).
//
// # Broker layout
//
// A bus topic is the Kafka topic of the same name (a name Kafka does not
// allow, one with ':' or over 249 bytes, becomes "bus.h." and its SHA-256);
// the backend creates a missing topic with Options.Partitions partitions
// (the broker's num.partitions when 0) and the broker's default
// replication. A group is the Kafka consumer group of the same name, so
// Kafka's tools show it. A record's key is the message key (none when
// empty); the backend puts a keyed record in the partition Kafka's own
// clients would (murmur2 of the key, as the Java producer and franz-go's
// default partitioner route it), so a key stays in one partition also
// with producers outside the bus, and a record without a key in
// backend.PartitionOf of its ID; the payload is the value; the message ID
// and the publish time travel in the record headers bus-kafka-id and
// bus-kafka-at, and every other header as a record header of its own
// name, byte-exact. A record without bus-kafka-id (a producer outside the
// bus) is delivered with the ID "<partition>-<offset>", its headers and
// its timestamp.
//
// # Delivery semantics
//
// At-least-once. Publish produces a batch with the idempotent producer
// (acks=all), all records at once, and returns once the brokers
// acknowledged each (a BatchError lists the records that failed).
//
//   - Subscribe sets a new group's position before it returns: at the end
//     of every partition for StartNewest (committed through kadm while the
//     group has no member), so what is published after Subscribe returned
//     is delivered; at the start for StartOldest. A group that exists
//     resumes where it stands. A member joins in the background.
//   - A member fetches ahead at most 1 MiB per partition and 8 MiB in
//     all (a larger record batch comes whole); Receive returns at most
//     what the bus asked for and leaves the rest for the next call.
//   - Per-message acks over offsets. The backend keeps, per owned
//     partition, the records delivered and not yet settled. Each commit
//     sets the partition's offset to its lowest unsettled record and puts
//     in the commit's metadata what the offset alone cannot say: the
//     offsets settled beyond it, the attempts of the unsettled ones and
//     the due times of held ones (bk1|d=...|w=...|a=..., under 3,800
//     bytes; the broker's offset.metadata.max.bytes is 4,096 by default).
//     A member that takes the partition over reads it back: a record
//     settled beyond a gap is not delivered again, and attempts and due
//     times carry over. Ack settles at once and wakes a commit loop that
//     commits right away, folding the acks that come meanwhile into the
//     next commit (a crash before it delivers those records again);
//     Nack, Release and Snooze return once their commit is done;
//     Subscription.Close commits what is left.
//   - Leases are timers the backend keeps: a delivery not settled within
//     its ack timeout is delivered again by this member with Attempt+1,
//     without replaying the rest of its partition. Extend restarts the
//     timer. A member that dies or hangs loses its partitions to the
//     others after the group's session timeout (Options.SessionTimeout);
//     they start at the committed offset with the metadata above. A
//     member cut off from the brokers for less than the session keeps its
//     partitions: the acks it made meanwhile are committed when the link
//     heals, and no lease runs out for them.
//   - Nack without a delay delivers the record again at once, counted.
//     Nack with a delay, Snooze and DeliverAt (the bus snoozes a record
//     fetched before its time) hold the record in the member, its offset
//     unsettled and its due time in the commit metadata, so that another
//     member or a restart holds it too: never early, a few milliseconds
//     late. Snooze and Release do not count an attempt.
//   - An Ack of a delivery whose lease ran out settles the record while
//     this member still owns its partition.
//   - Subscription.Close gives its unsettled deliveries back without
//     counting an attempt, commits, and leaves the group.
//   - A rebalance that takes partitions from a member (a member joins or
//     leaves; the group uses Kafka's cooperative sticky assignment, so
//     only the partitions that move are revoked) gives them to their
//     next owner only once the member let go of them: it stops
//     delivering their records, waits up to half the group's rebalance
//     timeout (which is the session timeout) for their deliveries under
//     way to be settled or given back, and commits. A delivery still unsettled
//     after the wait is delivered again by the next owner, from the
//     commit, its attempt counted.
//   - Dead letters are published by the bus (a copy to the dead-letter
//     topic, then the ack).
//
// # Key order
//
// Capabilities.KeyOwnership is true: Kafka's group assignment gives each
// partition, and so each key, to one member at a time, and the bus takes
// no group lock for a key-ordered subscription (bus.WithKeyOrdering):
// every member fetches its own partitions, and within a member the bus's
// key lines run a partition's keys in parallel, each in log order. A
// partition that moves (a join, a leave, Close) is handed over as above:
// what its old owner handled is settled and committed, what it gave back
// is at the commit's offset, so the next owner handles the partition's
// records from there in log order, a given-back record first, uncounted.
// A delivery whose lease runs out is delivered again by its member, with
// Attempt+1, without replaying the partition (docs/ordering.md says what
// the bus then does with its key). A member that dies or hangs keeps its
// partitions until the group's session timeout (Options.SessionTimeout,
// session_timeout) ends; the partitions' keys then resume on another
// member from the last commit, the dead member's unsettled deliveries
// first, with the attempts that commit recorded. The other partitions'
// keys go on meanwhile.
//
// # Deadlines
//
// Every call runs under its caller's ctx; connections have
// Options.DialTimeout and every request Options.RequestTimeout beyond
// the time it asks of the broker, so that no call waits on a dead
// network beyond them. Subscription.Close returns within about
// Options.CloseTimeout plus the client's own shutdown, Backend.Close
// within about twice Options.CloseTimeout.
//
// # Retention and health
//
// Kafka's own retention keeps a topic's records whatever its groups
// acked. BoundRetention (backend.RetentionBounder, the bus's lifecycle
// events topic) sets a topic's retention.ms to the bound's age and its
// segment.ms to half of it; the length bound is not applied. Ping
// (backend.Pinger) asks a broker for its API versions.
//
// # Inspection
//
// The backend implements backend.Inspector, TopicDeleter and GroupSeeker
// through kadm. Topics lists the Kafka topics with the records they
// retain (end less start offsets) and have ever taken (the end offsets);
// sizes and times are unknown. Groups reads each group's commit on the
// topic: pending is the unsettled records its metadata lists (a commit
// loop refreshes it every 250 ms while deliveries are made), lag the
// records after the committed offset that the group has neither settled
// nor received. Peek reads the partitions directly, merged by publish
// time. Delete removes listed records with DeleteRecords, which removes a
// partition's oldest records: the records not listed before the last
// listed one are first appended again (key, headers, payload and
// timestamp kept), so a crash in between may duplicate one, never remove
// it. DeleteTopic deletes the topic and the groups'
// offsets on it. SeekGroup commits the target offsets (the start, the
// end, or the first record at or after a time) with no metadata; Kafka
// takes it only from a group without live members.
//
// # Capabilities
//
// ConsumerGroups, Persistent, Redelivery, NackDelay, Ordered (one member
// receives a partition's first deliveries in publish order: a topic of one
// partition is ordered), StartOldest and Extend are true. PublishDedup is
// false (the idempotent producer removes the duplicates of its own
// retries, not those of a caller who publishes again) and Scheduling is
// false (a DeliverAt message is stored at once and held by the member
// that fetches it, so the conformance case DelayedNeverHoldBackImmediate
// is skipped). MaxPayload is the producer's batch limit less room for
// the key and headers. A group shares its load by partition: a topic of
// one partition has one active member. Subscriptions implement
// backend.Extender, Releaser and Snoozer. KeyOwnership is true (see Key
// order). The backend has no GroupLocker: the bus's group lock is not
// built on Kafka's assignment, and the conformance cases about it
// (GroupLock, KeyOrderFencedMember, SubscriptionHealthStandby) are
// skipped; so are the conformance crash cases, whose members cannot stop
// a Kafka client's heartbeats: the package's own test kills a member's
// link to the broker instead.
//
// # Partitioned topics
//
// The backend is a backend.NativePartitioner: the bus's CreateTopic(ctx,
// topic, n) creates the Kafka topic with n partitions (TopicPartitions),
// or reads the count of the one that exists, and the bus then publishes
// and subscribes to it as to any topic: Publish routes as above, and
// the group's assignment gives each partition to one member, handed
// over as under Key order. A member that the assignment leaves without a
// partition keeps polling its group, and its subscription is idle
// (backend.Idler): its Health says Standby.
package kafka
