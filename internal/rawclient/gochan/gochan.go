// Package gochan holds the baseline of mem://: a buffered Go channel
// between a producer and a consumer goroutine. It is a package of its own,
// apart from the broker clients' loops of rawclient, so that a benchmark
// of mem:// against it links no broker client.
package gochan

import "context"

// Channel is the baseline of mem://: a buffered Go channel. Publish
// copies each payload into a new slice (an in-process broker cannot keep
// the caller's buffer) and sends it; Consume receives and handles them on
// one goroutine.
type Channel struct{ ch chan []byte }

// New returns a channel that buffers size payloads.
func New(size int) *Channel { return &Channel{ch: make(chan []byte, size)} }

// Publish copies and sends each payload, waiting for room while ctx
// lasts.
func (c *Channel) Publish(ctx context.Context, payloads [][]byte) error {
	for _, pl := range payloads {
		p := make([]byte, len(pl))
		copy(p, pl)
		select {
		case c.ch <- p:
		default:
			select {
			case c.ch <- p:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// Consume passes each payload to h until stop is closed.
func (c *Channel) Consume(stop <-chan struct{}, h func([]byte)) {
	for {
		select { // the common case, without the stop channel
		case p := <-c.ch:
			h(p)
			continue
		default:
		}
		select {
		case p := <-c.ch:
			h(p)
		case <-stop:
			return
		}
	}
}

// Drain discards payloads until stop is closed, as a broker without
// subscribers drops what it cannot keep.
func (c *Channel) Drain(stop <-chan struct{}) {
	for {
		select {
		case <-c.ch:
		case <-stop:
			return
		}
	}
}
