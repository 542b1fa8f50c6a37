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
//     CLIENT UNBLOCK with the reader's client ID.
//   - Acks are one XACK per flush.
//   - Leases: an entry pending for longer than the ack timeout is
//     reclaimed with XAUTOCLAIM, at most a quarter of the ack timeout late.
//     One scan runs at a time per stream and group in a Backend, and it
//     claims only as many entries as the claiming subscription has room
//     for. Attempt is the entry's delivery count (read with XPENDING).
//   - Extend resets the idle time (XCLAIM ... JUSTID) without counting a
//     delivery, and fails if another consumer has taken the entry.
//   - Nack never moves the entry: it stays in the group's pending list and
//     a Lua script sets its idle time so that it becomes claimable exactly
//     when the delay ends. A delay longer than the ack timeout also records
//     a hold in the topic's hold ZSET; the promoter (one per topic in a
//     Backend) keeps the entry's idle time fresh until it is due. Holds live
//     in Redis, so they survive process restarts; a new subscription runs a
//     promoter pass before its first reclaim. Since the entry never leaves
//     the pending list, no crash can lose it or duplicate it.
//   - Dead-lettering is one Lua script that adds the copy to the
//     dead-letter stream and acks the original. On a cluster whose
//     dead-letter topic hashes to another slot (a name other than
//     "<topic>.dlq"), it adds the copy and then acks: a crash in between
//     leaves a duplicate in the dead-letter topic, never a loss.
//   - Malformed entries are dead-lettered (payload: the raw fields as a
//     JSON object, with the bus dead-letter headers), acked and reported
//     with observer.ScopeDecode; they never reach the handler.
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
// # Retention
//
// The default, RetainSettled, never trims an entry some group has not yet
// settled: a trimmer per subscribed topic (every Options.TrimInterval)
// trims approximately below the oldest entry any group still needs. It is
// the default because silently losing unsettled messages is the one thing
// the bus promises not to do; a stalled group then makes the stream grow,
// which MaxLen can cap at the cost of that promise. RetainMaxLen (XADD
// MAXLEN ~) and RetainMaxAge (XADD MINID ~) trim on publish and may trim
// unsettled entries, which are then reported as above. RetainAll never
// trims.
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
