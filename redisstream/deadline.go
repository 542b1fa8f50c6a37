package redisstream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of the backend's own I/O, where no caller's ctx applies.
const (
	// closeTimeout bounds Subscription.Close, which has no ctx: the
	// removal of the consumer from its group. When it runs out the
	// consumer is left in the group (it owns no entry; harmless).
	closeTimeout = 100 * time.Millisecond
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

// socketTimeouts reports whether c bounds every socket read and write by
// a timeout of its own (go-redis ReadTimeout and WriteTimeout, after its
// defaults: above zero).
func socketTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout > 0 && c.Options().WriteTimeout > 0
	case *redis.ClusterClient:
		return c.Options().ReadTimeout > 0 && c.Options().WriteTimeout > 0
	}
	return false
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
	return b.run(ctx, fn, false)
}

// callBounded is call for Publish: a ctx that has no deadline but can be
// cancelled also runs fn on the caller's goroutine when the client bounds
// each socket read and write by its own timeouts. A cancel then ends fn
// once the reply is in, or, over a dead link, within those timeouts
// rather than at once; in exchange a call costs no goroutine, whose
// hand-off is a third of a loopback round trip on a busy machine.
func (b *Backend) callBounded(ctx context.Context, fn func(context.Context) error) error {
	return b.run(ctx, fn, b.socketTimeouts)
}

// run is call, and callBounded when cancelInline is set.
func (b *Backend) run(ctx context.Context, fn func(context.Context) error, cancelInline bool) error {
	if ctx.Done() == nil {
		return fn(ctx)
	}
	// fn runs inline when something ends it in time: with a deadline, the
	// socket deadline go-redis sets from it (cancellation before it is
	// rare on these paths); without one, the client's own timeouts, when
	// cancelInline says they may.
	inline := cancelInline
	if _, ok := ctx.Deadline(); ok {
		inline = b.ctxTimeouts
	}
	if !inline {
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
