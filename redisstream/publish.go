package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

// pubTopic is what Publish keeps per topic: the stream key, boxed once
// (go-redis takes []any arguments, and boxing a string allocates).
type pubTopic struct {
	key    string
	keyArg any
}

// pubCache maps topics to their publish state. It stops growing at
// maxPubTopics entries (a process that publishes to ever new topics
// computes the state of the others per call).
type pubCache struct {
	m sync.Map // topic -> *pubTopic
	n atomic.Int64
}

const maxPubTopics = 4096

func (c *pubCache) get(prefix, topic string) *pubTopic {
	if v, ok := c.m.Load(topic); ok {
		return v.(*pubTopic)
	}
	key := streamKey(prefix, topic)
	p := &pubTopic{key: key, keyArg: key}
	if c.n.Load() < maxPubTopics {
		if v, loaded := c.m.LoadOrStore(topic, p); loaded {
			return v.(*pubTopic)
		}
		c.n.Add(1)
	}
	return p
}

// bytesArg passes a []byte to go-redis through a pointer, which boxes in
// an interface without an allocation.
type bytesArg []byte

// MarshalBinary returns the bytes as they are.
func (b *bytesArg) MarshalBinary() ([]byte, error) { return *b, nil }

// Publish adds every message of the batch to the topic's stream: one XADD
// for a single message, one pipelined round trip for more. It is safe for
// concurrent use, for one topic too. Its arguments are built in a few
// arrays per batch, so a message costs go-redis's command and reply and
// little else.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	pt := b.pubs.get(b.opts.Prefix, topic)
	trim := b.trimArgs()

	// The strings built per message (meta, header names) go in one
	// buffer that becomes one string. Every value is passed by pointer
	// into arrays owned by this call, so a call abandoned at ctx's end
	// never reads memory the caller reuses (payload bytes aside).
	nargs, nstr, nbuf := 0, 0, 0
	for _, m := range msgs {
		f := fieldCount(m)
		nargs += 3 + len(trim) + f
		nstr += f/2 - 1 + len(m.Headers) // meta, key, header names and values
		nbuf += metaSize(m)
		for k := range m.Headers {
			nbuf += len(headerPrefix) + len(k)
		}
	}
	type span struct{ slot, start, end int }
	buf := make([]byte, 0, nbuf)
	spans := make([]span, 0, nstr)
	args := make([]any, 0, nargs)
	strs := make([]string, nstr)
	payloads := make([]bytesArg, len(msgs))
	cmds := make([]*redis.StringCmd, len(msgs))
	si := 0
	str := func(v string) any {
		strs[si] = v
		si++
		return &strs[si-1]
	}
	text := func(start int) any {
		spans = append(spans, span{slot: si, start: start, end: len(buf)})
		si++
		return &strs[si-1]
	}
	for i, m := range msgs {
		start := len(args)
		args = append(args, "XADD", pt.keyArg)
		args = append(args, trim...)
		at := len(buf)
		buf = appendMeta(buf, m)
		args = append(args, "*", fieldMeta, text(at))
		if m.Key != "" {
			args = append(args, fieldKey, str(m.Key))
		}
		for k, v := range m.Headers {
			at := len(buf)
			buf = append(append(buf, headerPrefix...), k...)
			args = append(args, text(at), str(v))
		}
		payloads[i] = m.Payload
		args = append(args, fieldPayload, &payloads[i])
		cmds[i] = redis.NewStringCmd(ctx, args[start:len(args):len(args)]...)
	}
	all := string(buf)
	for _, sp := range spans {
		strs[sp.slot] = all[sp.start:sp.end]
	}
	var err error
	if len(cmds) == 1 {
		err = b.call(ctx, func(ctx context.Context) error {
			return b.client.Process(ctx, cmds[0])
		})
	} else {
		err = b.call(ctx, func(ctx context.Context) error {
			pipe := b.client.Pipeline()
			for _, c := range cmds {
				_ = pipe.Process(ctx, c)
			}
			_, err := pipe.Exec(ctx)
			return err
		})
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// The call may have been abandoned: its replies are not ours
		// to read, and any of the batch may have been stored.
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	var failed []backend.Failure
	for i, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			failed = append(failed, backend.Failure{Index: i, Err: fmt.Errorf("redisstream: publish %q: %w", topic, cerr)})
		}
	}
	if len(failed) == 0 || len(failed) == len(msgs) {
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	return &backend.BatchError{Failed: failed}
}

// trimArgs returns the trimming arguments of an XADD under the retention
// option, boxed.
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
