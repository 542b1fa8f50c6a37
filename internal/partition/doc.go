// Package partition runs a subscription on a partitioned topic: it keeps
// the member in its group (backend.Partitioner's heartbeats), derives the
// partitions the member owns from the live members, and runs one
// subscription per owned partition, handing a partition over by draining
// its subscription when the assignment moves it to another member.
//
// # Exclusive ownership
//
// The assignment decides which partitions a member tries to consume; the
// partition's group lock (backend.GroupLocker), taken by each partition's
// subscription before it fetches, decides who does. While members'
// views of the group disagree (one heartbeat interval after a join or a
// leave), two members may both try a partition: only the lock holder
// fetches. A member that drains a partition releases its lock last, so
// the next owner starts after the last settlement of the previous one; a
// member that died lets its lock lapse, and the next owner waits one ack
// timeout so that what the dead member left unsettled comes back first.
//
// # Concurrency
//
// A Manager is safe for concurrent use. Its goroutine and the partition
// subscriptions it started end before Done is closed.
package partition
