package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

// pubTopic is what Publish keeps per topic: the stream key and the keys
// of the publish script, boxed once (go-redis takes []any arguments, and
// boxing a string allocates).
type pubTopic struct {
	key      string
	keyArg   any
	schedArg any
	dueArg   any
	idsArgs  [2]any
	// trim, when set, holds the XADD trim arguments of a topic with a
	// retention bound (BoundRetention), in place of the backend's.
	trim atomic.Pointer[[]any]
}

// pubTopicOf returns the publish state of topic, derived once per topic
// (see internal/topiccache).
func (b *Backend) pubTopicOf(topic string) *pubTopic {
	if p, ok := b.pubs.Load(topic); ok {
		return p
	}
	k := newKeys(b.opts.Prefix, topic)
	return b.pubs.Store(topic, &pubTopic{key: k.stream, keyArg: k.stream, schedArg: k.sched, dueArg: k.due, idsArgs: [2]any{k.ids[0], k.ids[1]}})
}

// scriptHead is what a Publish through pubScript passes besides each
// message: the script's hash, the dedup window and the count of trim
// arguments, boxed, each message's due time (nil: all due now), and
// whether the script records the caller-set IDs.
type scriptHead struct {
	sha    any
	window any
	ntrim  any
	due    []int64
	dedup  bool
}

// bytesArg passes a []byte to go-redis through a pointer, which boxes in
// an interface without an allocation.
type bytesArg []byte

// MarshalBinary returns the bytes as they are.
func (b *bytesArg) MarshalBinary() ([]byte, error) { return *b, nil }

// Publish adds every message of the batch to the topic's stream: one XADD
// for a single message, one pipelined round trip for more. A batch with a
// caller-set ID (under the dedup window) or a message due later is one
// publish script call instead (pubScript); IDs the bus generated are
// never recorded. It is safe for concurrent use, for one topic too. Its
// arguments are built in pooled arrays, so a message costs go-redis's
// command and reply and little else.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	b.notePublished(topic)
	trim := b.trimArgs()
	if b.bounded.Load() {
		if a := b.pubTopicOf(topic).trim.Load(); a != nil && *a != nil {
			trim = *a
		}
	}
	var sh *scriptHead
	due := backend.DueTimes(msgs)
	dedup := b.opts.DedupWindow > 0 && callerIDs(msgs)
	if due != nil || dedup {
		sh = &scriptHead{sha: pubScript.Hash(), window: b.dedupArg, ntrim: len(trim), due: due, dedup: dedup}
		if len(msgs) > scriptChunk {
			return b.publishChunks(ctx, topic, msgs, trim, sh)
		}
	}
	return b.publishBatch(ctx, topic, msgs, trim, sh)
}

// callerIDs reports whether a message of msgs has an ID its caller set.
func callerIDs(msgs []*backend.Message) bool {
	for _, m := range msgs {
		if !m.IDGenerated {
			return true
		}
	}
	return false
}

// scriptChunk bounds the messages of one publish script call: a script
// holds the server for its whole run.
const scriptChunk = 128

// publishChunks publishes a large batch through the publish script in
// calls of scriptChunk messages, one after the other; the messages of a
// call that failed are listed in a *backend.BatchError.
func (b *Backend) publishChunks(ctx context.Context, topic string, msgs []*backend.Message, trim []any, sh *scriptHead) error {
	var failed []backend.Failure
	var last error
	for off := 0; off < len(msgs); off += scriptChunk {
		end := min(off+scriptChunk, len(msgs))
		part := *sh
		if sh.due != nil {
			part.due = sh.due[off:end]
		}
		err := b.publishBatch(ctx, topic, msgs[off:end], trim, &part)
		if err == nil {
			continue
		}
		last = err
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The round trip ran out its bound (publishCtx): the server
			// does not answer, and the calls after it are not sent.
			for i := off; i < len(msgs); i++ {
				failed = append(failed, backend.Failure{Index: i, Err: err})
			}
			break
		}
		var be *backend.BatchError
		if errors.As(err, &be) {
			for _, f := range be.Failed {
				f.Index += off
				failed = append(failed, f)
			}
			continue
		}
		for i := off; i < end; i++ {
			failed = append(failed, backend.Failure{Index: i, Err: err})
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(failed) == len(msgs):
		return last
	}
	return &backend.BatchError{Failed: failed}
}

// publishBatch publishes msgs with pipelined XADDs, or with one publish
// script call when sh is set: one round trip, under publishCtx's bound
// when ctx has no deadline.
func (b *Backend) publishBatch(ctx context.Context, topic string, msgs []*backend.Message, trim []any, sh *scriptHead) error {
	ctx, cancel, bounded := b.publishCtx(ctx)
	defer cancel()
	pt := b.pubTopicOf(topic)
	nbuf, nstr, nargs := pubSizes(msgs, len(trim), sh)
	sc := getPubScratch(nbuf, nstr, nargs, len(msgs))
	cmds := sc.build(ctx, pt, trim, msgs, sh)
	err := b.send(ctx, cmds)
	if sh != nil && err != nil && ctx.Err() == nil {
		err = b.sendUnscripted(ctx, cmds)
	}
	if ctx.Err() != nil {
		// The call may have been abandoned and still be using the
		// arguments: they are left to it, and its replies are not ours
		// to read; any of the batch may have been stored.
		if err == nil {
			return nil
		}
		if bounded && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = b.boundError(err)
		}
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	defer putPubScratch(sc)
	if err == nil && sh != nil {
		b.wakePromoterIfHeld(topic, sh.due)
	}
	return publishResult(topic, cmds, err)
}

// sendUnscripted sends again, as EVAL with the script's source, the
// commands that failed because the server did not have the publish script
// (the first publish, or after a restart or a failover); they did not
// run. EVAL caches the script for the EVALSHAs that follow, and needs no
// right beyond the one EVALSHA does.
func (b *Backend) sendUnscripted(ctx context.Context, cmds []*redis.StringCmd) error {
	var again []*redis.StringCmd
	var idx []int
	for i, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			args := slices.Clone(c.Args())
			args[0], args[1] = "EVAL", pubScriptSource
			again = append(again, redis.NewStringCmd(ctx, args...))
			idx = append(idx, i)
		}
	}
	if len(again) == 0 {
		return errFirst(cmds)
	}
	err := b.send(ctx, again)
	for j, i := range idx {
		cmds[i] = again[j]
	}
	if err != nil {
		return err
	}
	return errFirst(cmds)
}

// errFirst is the first error of cmds, or nil.
func errFirst(cmds []*redis.StringCmd) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// pubSizes counts what the commands of msgs need: bytes of the strings
// built per message (meta, header names, recorded ID), strings and
// arguments.
func pubSizes(msgs []*backend.Message, trimArgs int, sh *scriptHead) (nbuf, nstr, nargs int) {
	for _, m := range msgs {
		f := fieldCount(m)
		nargs += 3 + trimArgs + f
		nstr += f/2 - 1 + len(m.Headers) // meta, key, header names and values
		nbuf += metaSize(m)
		if len(m.Headers) > 0 { // ranging over an empty map still sets up an iterator
			for k := range m.Headers {
				nbuf += len(headerPrefix) + len(k)
			}
		}
		if sh != nil {
			nstr += 2 // recorded ID, due time
			if sh.dedup && len(m.Headers) > 0 {
				nbuf += len(m.ID) + 1 + len(m.Headers[backend.HeaderReplayed])
			}
		}
	}
	if sh != nil {
		nargs += 9 + trimArgs
	}
	return nbuf, nstr, nargs
}

// replaySep separates a replayed message's ID from its replay stamp in
// the ID the publish script records, so a replay is not taken for a
// duplicate. IDs hold no spaces, so the two never meet.
const replaySep = ' '

// build makes one XADD per message in the scratch's arrays, or one
// publish script call for the batch when sh is set. The strings built per
// message (meta, header names, replayed IDs) go in one buffer that becomes
// one string. Every value is passed by pointer into arrays this call owns
// until it returns (or for good, when it is abandoned at ctx's end), so
// go-redis never reads memory the caller reuses (payload bytes aside).
func (sc *pubScratch) build(ctx context.Context, pt *pubTopic, trim []any, msgs []*backend.Message, sh *scriptHead) []*redis.StringCmd {
	sc.si = 0
	if sh != nil {
		sc.args = append(sc.args, "EVALSHA", sh.sha, 5, pt.keyArg, pt.schedArg, pt.dueArg, pt.idsArgs[0], pt.idsArgs[1], sh.window, sh.ntrim)
		sc.args = append(sc.args, trim...)
	}
	for i, m := range msgs {
		start := len(sc.args)
		if sh == nil {
			sc.args = append(sc.args, "XADD", pt.keyArg)
			sc.args = append(sc.args, trim...)
			sc.args = append(sc.args, "*")
		} else {
			var due any = "0"
			if sh.due != nil && sh.due[i] > 0 {
				due = sc.str(strconv.FormatInt(sh.due[i], 10))
			}
			sc.args = append(sc.args, sc.recordedID(m, sh.dedup), due, fieldCount(m))
		}
		sc.fields(i, m)
		if sh == nil {
			sc.cmds[i] = redis.NewStringCmd(ctx, sc.args[start:len(sc.args):len(sc.args)]...)
		}
	}
	cmds := sc.cmds
	if sh != nil {
		cmds = cmds[:1]
		cmds[0] = redis.NewStringCmd(ctx, sc.args...)
	}
	all := string(sc.buf)
	for _, sp := range sc.spans {
		sc.strs[sp.slot] = all[sp.start:sp.end]
	}
	return cmds
}

// recordedID is the ID the publish script records for m: none ("") when
// dedup is off for the batch or the bus generated the ID; for a message
// the bus replayed from a dead-letter topic, the ID and the replay's
// stamp.
func (sc *pubScratch) recordedID(m *backend.Message, dedup bool) any {
	if !dedup || m.IDGenerated {
		return ""
	}
	r, ok := m.Headers[backend.HeaderReplayed]
	if !ok {
		return sc.str(m.ID)
	}
	at := len(sc.buf)
	sc.buf = append(append(append(sc.buf, m.ID...), replaySep), r...)
	return sc.text(at)
}

// fields appends the stream fields of message i.
func (sc *pubScratch) fields(i int, m *backend.Message) {
	at := len(sc.buf)
	sc.buf = appendMeta(sc.buf, m)
	sc.args = append(sc.args, fieldMeta, sc.text(at))
	if m.Key != "" {
		sc.args = append(sc.args, fieldKey, sc.str(m.Key))
	}
	if len(m.Headers) > 0 {
		for k, v := range m.Headers {
			at := len(sc.buf)
			sc.buf = append(append(sc.buf, headerPrefix...), k...)
			sc.args = append(sc.args, sc.text(at), sc.str(v))
		}
	}
	sc.payloads[i] = m.Payload
	sc.args = append(sc.args, fieldPayload, &sc.payloads[i])
}

// str passes v through the next string slot.
func (sc *pubScratch) str(v string) any {
	sc.strs[sc.si] = v
	sc.si++
	return &sc.strs[sc.si-1]
}

// text passes buf[start:] (as it ends now) through the next string slot,
// filled once buf is final.
func (sc *pubScratch) text(start int) any {
	sc.spans = append(sc.spans, pubSpan{slot: sc.si, start: start, end: len(sc.buf)})
	sc.si++
	return &sc.strs[sc.si-1]
}

// send runs the XADDs: one command, or one pipeline for a batch.
func (b *Backend) send(ctx context.Context, cmds []*redis.StringCmd) error {
	if len(cmds) == 1 {
		return b.call(ctx, func(ctx context.Context) error {
			return b.client.Process(ctx, cmds[0])
		})
	}
	return b.call(ctx, func(ctx context.Context) error {
		pipe := b.client.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// publishResult is Publish's error: nil, one error for the whole batch, or
// a *backend.BatchError naming the messages that failed.
func publishResult(topic string, cmds []*redis.StringCmd, err error) error {
	if err == nil {
		return nil
	}
	var failed []backend.Failure
	for i, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			failed = append(failed, backend.Failure{Index: i, Err: fmt.Errorf("redisstream: publish %q: %w", topic, cerr)})
		}
	}
	if len(failed) == 0 || len(failed) == len(cmds) {
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	return &backend.BatchError{Failed: failed}
}

// pubScratch holds the arrays one Publish call builds its commands in,
// reused through pubScratchPool by calls that are done with them.
type pubScratch struct {
	si       int // the next free slot of strs
	buf      []byte
	spans    []pubSpan
	args     []any
	strs     []string
	payloads []bytesArg
	cmds     []*redis.StringCmd
}

// pubSpan says that strs[slot] is buf[start:end].
type pubSpan struct{ slot, start, end int }

var pubScratchPool = sync.Pool{New: func() any { return new(pubScratch) }}

// maxPooledArgs bounds the scratch kept for reuse, so one huge batch does
// not pin its arrays.
const maxPooledArgs = 4096

func getPubScratch(nbuf, nstr, nargs, nmsgs int) *pubScratch {
	sc := pubScratchPool.Get().(*pubScratch)
	sc.buf = slices.Grow(sc.buf[:0], nbuf)
	sc.spans = slices.Grow(sc.spans[:0], nstr)
	sc.args = slices.Grow(sc.args[:0], nargs)
	sc.strs = slices.Grow(sc.strs[:0], nstr)[:nstr]
	sc.payloads = slices.Grow(sc.payloads[:0], nmsgs)[:nmsgs]
	sc.cmds = slices.Grow(sc.cmds[:0], nmsgs)[:nmsgs]
	return sc
}

// putPubScratch drops every reference the scratch holds (user strings,
// payloads, commands) and pools it.
func putPubScratch(sc *pubScratch) {
	if cap(sc.args) > maxPooledArgs {
		return
	}
	clear(sc.args)
	clear(sc.strs)
	clear(sc.payloads)
	clear(sc.cmds)
	pubScratchPool.Put(sc)
}

// trimArgs returns the trimming arguments of an XADD under the retention
// option, boxed: none, or three (the publish script counts on it).
func (b *Backend) trimArgs() []any {
	switch b.opts.Retention {
	case RetainMaxLen:
		return b.maxLenArgs
	case RetainMaxAge:
		minID := strconv.FormatInt(time.Now().Add(-b.opts.MaxAge).UnixMilli(), 10)
		return []any{"MINID", "~", minID}
	case RetainSettled:
		return b.maxLenArgs // nil without MaxLen
	}
	return nil
}
