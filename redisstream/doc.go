// Package redisstream is the Redis Streams backend of the bus, built on
// github.com/redis/go-redis/v9. Redis 7.0 is the floor.
//
// Link it in and open it by URL:
//
//	import _ "github.com/eventbus-go/bus/redisstream"
//
//	b, err := bus.Open(ctx, "redis://user:secret@127.0.0.1:6379/0?retention=settled")
//
// or build it over a client of your own with [New], which accepts a
// *redis.Client (single node, or sentinel through redis.NewFailoverClient)
// and a *redis.ClusterClient.
//
// # URL
//
// redis:// and rediss:// URLs carry user, password and database as usual.
// Backend parameters are prefix, block, retention, maxlen, maxage,
// trim_interval, max_payload and cluster (with addr=host:port for more seed
// nodes); every other parameter is passed to the Redis client (pool_size,
// dial_timeout ...) and an unknown one is an error. rediss:// always
// verifies the server certificate: skip_verify is refused, so verification
// is never turned off by a URL; build the client yourself to use a custom
// tls.Config.
//
// # Key layout
//
// A topic's keys share one hash tag, so they live in one cluster slot and
// Lua scripts may use them together. The tag is the topic without trailing
// ".dlq" suffixes, so a topic and its default dead-letter topic share a
// slot too:
//
//	bus:{orders}          stream of topic "orders"
//	bus:{orders}.dlq      stream of topic "orders.dlq" (same slot)
//	bus:{orders}#hold     ZSET of nacks whose delay outlasts the ack timeout
//	bus:{orders}#held     HASH of those holds by group and entry ID, with the
//	                      entry's owner; the reclaim looks claimed entries up
//	bus:{orders}#lease    HASH of each group's lease: the longest ack timeout
//	                      of its members, in ms; the group reclaims by it
//	bus:{orders}#sched    stream of the messages held until their DeliverAt
//	bus:{orders}#due      ZSET of #sched's entries by due time (ms)
//	bus:{orders}#ids:0    HASH of the caller-set IDs published in an even
//	bus:{orders}#ids:1    or odd time bucket of the dedup window's length
//
// A Publish of a message whose ID the caller set (with the dedup window
// on: Options.DedupWindow, two minutes by default) or of a message due
// later is one script call per batch: it records each caller-set ID in
// the hash of the current bucket (HSETNX; an ID in it or in the previous
// bucket's is a duplicate and is not stored again) and adds the message
// to the stream, or to #sched and #due. A batch of messages whose IDs the
// bus generated, none of them delayed, is pipelined XADDs: such IDs are
// unique by construction and are never recorded. Every subscribing process promotes due messages into the stream
// with one script, about every 50ms while the schedule holds messages and
// at once when it publishes an earlier one itself.
//
// "bus" is Options.Prefix. Topic names cannot hold '{', '}' or '#', so keys
// of distinct topics never collide.
//
// Each entry has the fields m ("<publish time in Unix ms> <message ID>"),
// key (when set), one "h:<name>" field per header and p (payload); few
// fields keep XADD and XREADGROUP cheap on the server. Headers are
// namespaced under "h:", so a user header can never overwrite a reserved
// field. An entry with a missing reserved field, a foreign field or a bad
// value is malformed.
//
// # Delivery semantics
//
// At-least-once. Each bus group is a Redis consumer group, created with
// MKSTREAM at "$" (StartNewest) or "0" (StartOldest) when missing; each
// subscription is a consumer with a unique name (host, pid, random).
//
//   - Receive reads with XREADGROUP ... COUNT n BLOCK b, where n is exactly
//     the capacity the bus reserved and b is at most Options.Block (1s).
//     Each subscription reads on a connection of its own, taken from a read
//     client cloned from the given client's options (on a cluster, from the
//     node holding the stream), so reads never queue behind XACK or XADD. A
//     cancelled ctx ends a blocked read at once: another connection sends
//     CLIENT UNBLOCK with the reader's client ID. The reply is read raw and
//     parsed in place (RESP2 or RESP3), with no field map per entry; a
//     given Options.ReadClient whose read timeout is shorter than BLOCK +
//     1s, or off, gets go-redis's typed XREADGROUP instead, whose deadline
//     go-redis extends by the BLOCK. While reads find entries, the next
//     one runs on the caller's goroutine with a BLOCK of at most 50ms and
//     a socket deadline 200ms after it (a reply slower than that fails the
//     read, and reads go back to their own goroutine and the full BLOCK).
//     While the stream is busy (the last read found 8 entries or more,
//     yet under half its COUNT, and the last two found entries at 50,000
//     a second or more), the next read waits Options.ReadLinger (200µs)
//     first and takes what arrived meanwhile: fewer round trips and less
//     server work per message, for up to that much latency on a busy
//     stream; reads of a quieter stream or of a backlog never wait.
//   - A read whose reply never arrives (the server answered after the
//     read's deadline, as a paused or overloaded server does, or the
//     connection died mid-read) may still have run at the server, leaving
//     its entries pending to the consumer with no handler holding them.
//     Before its next read the subscription takes them back: it fences
//     the connections it gave up on (CLIENT KILL ID, so no read sent on
//     them can still run), then reads its own pending entries after the
//     highest entry ID it handed out (a Lua script: XPENDING, XRANGE,
//     and XCLAIM ... JUSTID to restart their lease) and hands them out
//     before anything newer, without waiting an ack timeout. Every entry
//     it handed out is at or below that ID, and every entry a lost
//     XREADGROUP > took is above it. XREADGROUP ... 0 is not used: it
//     would count one more delivery of each entry, and the script leaves
//     the count the lost read set, so an entry no handler saw keeps
//     Attempt 1. Without the CLIENT KILL permission, and through a
//     Sentinel failover client, it recovers unfenced
//     (the server runs commands in the order they reach it, so only a
//     link that delays the lost read past the recovery hides entries,
//     which then come back after their lease). Stats.Recovered counts
//     the entries taken back. A subscription that closes before it took
//     them back gives them back in Close instead (the same fence, then
//     XCLAIM ... IDLE RETRYCOUNT JUSTID: claimable at once, the lost
//     delivery uncounted, within 1s), so that the group's next reader
//     (the next holder of a key-ordered group's lock) has them at its
//     next reclaim scan. An XAUTOCLAIM whose reply is lost is not
//     recovered this way: its entries come back after another lease.
//   - Acks are one XACK per flush.
//   - Publish sends one XADD for a single message and one pipeline for a
//     batch; concurrent calls, for one topic too, share nothing but a
//     cache of stream keys.
//   - Leases: an entry pending for longer than the ack timeout is
//     reclaimed with XAUTOCLAIM, at most a quarter of the ack timeout late.
//     One scan runs at a time per stream and group in a Backend, and it
//     claims only as many entries as the claiming subscription has room
//     for. Attempt is the entry's delivery count (read with XPENDING in
//     the same script).
//   - Extend resets the idle time (XCLAIM ... JUSTID) without counting a
//     delivery.
//   - PendingDeliveries (backend.PendingLister: a key-ordered member
//     taking over from a crashed one holds back only the keys it left)
//     reads the group's pending entries list with XPENDING and their
//     message IDs and keys with XRANGE, in one pipeline, up to the count
//     asked for; a lease end is the group's lease less the entry's idle
//     time.
//   - Release (backend.Releaser: a delivery whose handler a shutdown
//     cancelled) makes the entry claimable at once and lowers its
//     delivery count by one (XCLAIM ... RETRYCOUNT), in a Lua script with
//     the staleness check below: the member that reclaims it sees the
//     released delivery's Attempt again, so deploys do not use up max
//     deliveries.
//   - Stale settlements: an AckID carries the entry ID and the delivery
//     count the entry had when it was handed out. Every delivery
//     (XREADGROUP, XAUTOCLAIM) increments the count; Nack, Extend and the
//     promoter do not (XCLAIM ... JUSTID). Nack, Extend and DeadLetter run
//     as Lua scripts that first read the entry's pending record (XPENDING)
//     and act only if its consumer is this subscription and its count is
//     the AckID's; otherwise they change nothing and return an error
//     wrapping backend.ErrStale (also when the entry is no longer
//     pending). Ack is a plain XACK: an Ack of a delivery whose lease ran
//     out still settles the message if it is unsettled, and is never an
//     error.
//   - Nack never moves the entry: it stays in the group's pending list and
//     a Lua script sets its idle time so that it becomes claimable when
//     the delay ends (rounded up to the millisecond, and one more: Redis
//     counts idle time in whole milliseconds), never before. A delay
//     longer than the ack timeout also records a hold, due by the
//     server's clock, in the topic's hold ZSET and hold index; the
//     promoter (one per topic in a Backend) keeps the entry's idle time
//     fresh until it is due, and makes it claimable at its due time. A
//     held entry is never handed out before its due time, whatever the
//     promoter's timing (a late pass, a stalled or vanished process): the
//     reclaim script looks each entry it claims up in the hold index and,
//     while the hold's due time is ahead, puts it back in the same atomic
//     step, to the same owner and with the same delivery count, so no
//     delivery is counted. Holds live in Redis, so they survive process
//     restarts; a new subscription runs a promoter pass before its first
//     reclaim. Since the entry never leaves the pending list, no crash can
//     lose it or duplicate it.
//   - Delays end on time: a Backend keeps the due times of the entries
//     its subscriptions gave back (Nack, a retry, Snooze), and when one
//     comes it ends the blocked XREADGROUP of a subscription of that group
//     (CLIENT UNBLOCK; Redis itself ends a BLOCK only on its server cron,
//     every 100ms at the default hz) and claims the entry, a few
//     milliseconds after the delay on an idle machine. An entry given back
//     by a process that has since gone, or that has no room for it, is
//     claimed by the next lease scan of another member, at most a quarter
//     of the ack timeout (and at most a second) late.
//   - Dead-lettering is one Lua script that adds the copy to the
//     dead-letter stream and acks the original. On a cluster whose
//     dead-letter topic hashes to another slot (a name other than
//     "<topic>.dlq"), it adds the copy and then acks: a crash in between
//     leaves a duplicate in the dead-letter topic, never a loss.
//   - Malformed entries are dead-lettered (payload: the raw fields as a
//     JSON object, with the bus dead-letter headers), acked and reported
//     with observer.ScopeDecode; they never reach the handler. Decode
//     errors, events and the dead-letter reason name the entry ID, the
//     reserved field concerned and the problem (missing field, bad time,
//     foreign fields counted, wrong type), never a foreign field's name
//     nor any value read from the wire.
//   - Entries deleted while pending (trimmed, XDEL) are acked, counted in
//     Stats and reported with observer.ScopeReclaim.
//   - NOGROUP (the server lost its data, or the stream was deleted)
//     re-creates the group from the oldest retained entry, counts it,
//     reports it with observer.ScopeReclaim, and backs off (up to 5s) if it
//     repeats.
//   - Publish sends a batch as pipelined XADDs in one round trip. When only
//     some fail it returns a *backend.BatchError.
//
// Members of one group should use the same ack timeout: reclaim and nack
// delays are computed from it.
//
// # Deadlines
//
// Every call returns when its ctx ends, over a dead link too:
//
//   - The read client and clients opened from a URL enable go-redis
//     ContextTimeoutEnabled, so a ctx deadline ends socket I/O.
//   - A call whose ctx has no deadline but can be cancelled, and every
//     call whose ctx can end on a client given to New without
//     ContextTimeoutEnabled, runs its I/O on a goroutine of its own and
//     returns ctx.Err() when ctx ends; the abandoned I/O finishes within
//     the client's read and write timeouts, or at once when the client is
//     closed. (A ctx with a deadline that is cancelled early ends its I/O
//     at the deadline.) Enable ContextTimeoutEnabled on clients given to
//     New: deadlines then cost no goroutine.
//   - A Publish whose ctx has no deadline returns within the client's
//     write timeout plus its read timeout (go-redis's defaults: 5s each)
//     when the client has both: each of its round trips runs under that
//     deadline, which also ends go-redis's retries of a timed-out command
//     (each on a new connection whose handshake waits for a reply too).
//     The error of a round trip that ran it out wraps
//     context.DeadlineExceeded and names the bound; on a client with
//     ContextTimeoutEnabled the round trip runs on the caller's
//     goroutine, and a cancel takes effect when the reply is in or, over
//     a dead link, at the bound. Give Publish a deadline for a tighter
//     bound.
//   - A blocked XREADGROUP whose ctx ends is unblocked with CLIENT UNBLOCK
//     (bounded by 250ms); if the read has not come back by then, Receive
//     returns and the read is abandoned with its connection. A read never
//     outlives its BLOCK by more than 1s (a deadline on the read client;
//     an Options.ReadClient without ContextTimeoutEnabled ends it at its
//     read timeout, or at go-redis's own bound, BLOCK + 10s, when that
//     timeout is shorter than BLOCK + 1s or off); Backend.Close waits for
//     it.
//   - The backend's own work has short bounds: Subscription.Close, which
//     has no ctx, gives what lost reads took back within 1s (only after
//     one) and the removal of its consumer 100ms; each promoter
//     and trimmer pass 5s, and stopping them does not wait for their I/O.
//     Malformed and trimmed entries are settled within the Receive ctx;
//     when it ends first they stay pending and are handled again after
//     their lease.
//
// # Errors
//
// Receive marks with backend.Permanent the errors that no retry fixes, so
// the bus ends the subscription: NOPERM and NOAUTH (the ACL user lacks a
// command or key), WRONGTYPE (the stream key holds another type) and
// unknown command or subcommand (not Redis 7, or a renamed command).
// Connection errors, timeouts, LOADING, BUSY, READONLY, MASTERDOWN and
// cluster redirections are transient.
//
// # Least privilege
//
// An ACL user with these commands on the keys "<prefix>:*" suffices for
// every operation (publish, consume, ack, delayed nack, extend,
// dead-letter, trim, close):
//
//	ACL SETUSER bus on >secret ~bus:* resetchannels -@all
//	    +xadd +xreadgroup +xack +xautoclaim +xpending +xclaim
//	    +xgroup|create +xgroup|createconsumer +xgroup|delconsumer
//	    +xinfo|groups +xtrim
//	    +zadd +zrange +zrangebyscore +zrem +zscore +hget +hset +hdel
//	    +xrange +xdel +set +get
//	    +evalsha +eval +time +del +pexpire
//	    +client|id +client|unblock +client|kill
//	    +ping
//
// (+ping only for bus.Open, which pings the server; +client|kill only
// kills the subscription's own abandoned read connections, see Delivery
// semantics; SeekGroup, "bus groups
// reset", also needs +xgroup|setid, DeleteTopic +del, and the members of
// partitioned topics +time +zremrangebyscore +pttl +pexpire.) The scripts'
// commands are checked against the same ACL; writes to keys outside the
// prefix are denied.
//
// # Retention
//
// The default, RetainSettled, never trims an entry some group has not yet
// settled, and trims every entry all groups have, whether or not a
// subscription runs: every Options.TrimInterval (10s by default) a
// Backend trims each topic it subscribes or published to below the
// oldest entry any group still needs (XTRIM MINID, whole nodes first,
// then the entries of the node that holds that oldest entry), and
// TrimSettled (backend.SettledTrimmer) does so for one topic: the bus
// calls it when a subscription closes, after its settlements are
// flushed. A stream with no group is not trimmed: its
// entries wait for the first group. It is
// the default because silently losing unsettled messages is the one thing
// the bus promises not to do; a stalled group then makes the stream grow,
// which MaxLen can cap at the cost of that promise. RetainMaxLen (XADD
// MAXLEN ~) and RetainMaxAge (XADD MINID ~) trim on publish and may trim
// unsettled entries, which are then reported as above. RetainAll never
// trims. BoundRetention (the bus's lifecycle events topic) caps one
// topic by length (XADD MAXLEN ~) and age (XTRIM MINID ~ every
// TrimInterval) whatever its groups settled.
//
// # Capabilities
//
// ConsumerGroups, Persistent (as far as the server persists: use AOF with
// appendfsync always for no loss across server crashes), Redelivery,
// NackDelay, Ordered (one consumer receives first deliveries in stream
// order), StartOldest and Extend are all true. MaxPayload is
// Options.MaxPayload (64 MiB by default). Subscriptions implement
// backend.Extender and backend.DeadLetterer.
package redisstream
