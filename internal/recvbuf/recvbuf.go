// Package recvbuf holds the message structs a backend's Receive returns,
// so that its next Receive reuses them, as the SPI allows (see
// backend.Subscription): only what outlives the call, the AckIDs and the
// message data, is allocated per call.
package recvbuf

import "github.com/eventbus-go/bus/backend"

// Buffer is the messages of one subscription's last Receive. Its zero
// value is ready to use; it is not safe for concurrent use (Receive is
// called from one goroutine at a time).
type Buffer struct {
	vals []backend.Message
	out  []*backend.Message
	used int // vals handed out by the last Next
}

// Next returns n zeroed messages for a Receive to fill, and an empty slice
// with room for n to return them in. What the last call left is cleared
// first, so the collector can take the payloads of settled messages.
func (b *Buffer) Next(n int) ([]backend.Message, []*backend.Message) {
	if cap(b.vals) < n {
		b.vals = make([]backend.Message, n)
		b.out = make([]*backend.Message, 0, n)
	} else {
		clear(b.vals[:max(n, b.used)])
		clear(b.out[:max(n, b.used)])
	}
	b.used = n
	return b.vals[:n], b.out[:0]
}

// Overwrite is Next for a Receive that assigns each of the n messages
// whole (m = backend.Message{...}) before it returns it: the n are handed
// out as the last call left them, and only the messages past n are
// cleared. It saves clearing what is about to be overwritten.
func (b *Buffer) Overwrite(n int) ([]backend.Message, []*backend.Message) {
	if cap(b.vals) < n {
		return b.Next(n)
	}
	if b.used > n {
		clear(b.vals[n:b.used])
	}
	b.used = n
	return b.vals[:n], b.out[:0]
}
