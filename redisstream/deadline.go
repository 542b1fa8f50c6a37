package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of the backend's own I/O, where no caller's ctx applies.
const (
	// closeTimeout bounds Subscription.Close, which has no ctx: the
	// removal of the consumer from its group. When it runs out the
	// consumer is left in the group (it owns no entry; harmless).
	closeTimeout = 100 * time.Millisecond
	// giveBackTimeout bounds the give-back in Subscription.Close of what
	// reads given up on took (giveBackLost).
	giveBackTimeout = time.Second
	// unblockTimeout bounds the CLIENT UNBLOCK sent when the ctx of a
	// blocked read ends.
	unblockTimeout = 250 * time.Millisecond
	// readGrace is how long a read waits for the server's reply after its
	// BLOCK has run out; a read past it is abandoned with a timeout and
	// its connection dropped.
	readGrace = time.Second
	// inlineBlock caps the BLOCK of a read that runs inline, and
	// inlineGrace is how long such a read waits for the reply after its
	// BLOCK; together they bound how late an inline read returns after
	// its ctx ends over a dead link. A reply slower than inlineGrace
	// fails the read, and the next one runs on a goroutine.
	inlineBlock = 50 * time.Millisecond
	inlineGrace = 200 * time.Millisecond
	// passTimeout bounds one pass of a background task (promoter,
	// trimmer).
	passTimeout = 5 * time.Second
)

// contextTimeouts reports whether c applies ctx deadlines to its socket
// I/O (go-redis ContextTimeoutEnabled).
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// publishBound is how long one attempt of a command on c may take when
// the caller's ctx sets no deadline: its write timeout, to send the
// command, plus its read timeout, for the reply (after go-redis's
// defaults: 5 s each). It is 0 when c leaves either unbounded, or is a
// client whose options the backend cannot read.
func publishBound(c redis.UniversalClient) time.Duration {
	var read, write time.Duration
	switch c := c.(type) {
	case *redis.Client:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.ClusterClient:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	}
	if read <= 0 || write <= 0 {
		return 0
	}
	return read + write
}

// publishCtx returns the ctx one round trip of a Publish runs under:
// ctx, or, when ctx has no deadline and the client has both socket
// timeouts, ctx with the deadline b.pubBound from now (the client's write
// timeout plus its read timeout). go-redis retries a command whose reply
// timed out, each retry on a new connection whose handshake waits for a
// reply too, so the timeouts alone bound a round trip over a frozen
// server only by their sum over every attempt and handshake; the
// deadline ends all of them at once. bounded says the deadline is the
// backend's, not the caller's.
func (b *Backend) publishCtx(ctx context.Context) (_ context.Context, cancel context.CancelFunc, bounded bool) {
	if _, ok := ctx.Deadline(); ok || b.pubBound <= 0 {
		return ctx, func() {}, false
	}
	ctx, cancel = context.WithTimeout(ctx, b.pubBound)
	return ctx, cancel, true
}

// boundError is the error of a Publish round trip that ran out the bound
// publishCtx set: it says which bound that was.
func (b *Backend) boundError(err error) error {
	return fmt.Errorf("no reply within %v, the client's write timeout plus its read timeout (the bound of a Publish whose ctx has no deadline): %w", b.pubBound, err)
}

// call runs fn, which does I/O on the command client, and returns when fn
// does or when ctx ends, whichever comes first. go-redis ends socket I/O
// at a ctx deadline only with ContextTimeoutEnabled, and never at a mere
// cancellation; in those cases fn runs on a goroutine of its own and is
// abandoned when ctx ends: it finishes within the client's read and
// write timeouts, or at once when the client is closed, and its result
// is discarded. A caller must not read what fn writes once call has
// returned ctx.Err().
func (b *Backend) call(ctx context.Context, fn func(context.Context) error) error {
	if ctx.Done() == nil {
		return fn(ctx)
	}
	// fn runs inline when the socket deadline go-redis sets from ctx's
	// deadline ends it in time (cancellation before it is rare on these
	// paths).
	_, ok := ctx.Deadline()
	if !ok || !b.ctxTimeouts {
		return b.async(ctx, fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := fn(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// async runs fn on a goroutine of its own and returns when fn does or when
// ctx ends, whichever comes first (see call). When ctx has already ended,
// fn does not run.
func (b *Backend) async(ctx context.Context, fn func(context.Context) error) error {
	return b.asyncOrRelease(ctx, fn, nil)
}

// asyncOrRelease is async for an fn that acquires something: when the
// call gives up on fn (ctx ended while fn ran), release runs once fn has
// returned, to free what fn acquired. Backend.Close waits for a pending
// release as for an abandoned read (b.reads). release never runs for an
// fn that did not start, so nothing waits for one that never will.
func (b *Backend) asyncOrRelease(ctx context.Context, fn func(context.Context) error, release func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if release != nil {
			b.reads.Add(1)
			go func() {
				defer b.reads.Done()
				<-done
				release()
			}()
		}
		return ctx.Err()
	}
}
