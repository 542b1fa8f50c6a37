package redisstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

func TestParseXReadRepliesOfBothProtocols(t *testing.T) {
	entry := "*2\r\n$3\r\n1-1\r\n*4\r\n$1\r\nm\r\n$5\r\n7 abc\r\n$1\r\np\r\n$4\r\nx\r\ny\r\n"
	tests := []struct {
		name string
		raw  string
	}{
		{name: "RESP2", raw: "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n" + entry + "*2\r\n$3\r\n1-2\r\n*-1\r\n"},
		{name: "RESP3", raw: "%1\r\n$1\r\ns\r\n*2\r\n" + entry + "*2\r\n$3\r\n1-2\r\n_\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, fields, err := parseXRead([]byte(tt.raw), nil, nil)
			require.NoError(t, err)
			require.Len(t, entries, 2, "one entry with fields, one deleted")
			assert.Equal(t, "1-1", string(entries[0].id))
			assert.False(t, entries[0].deleted)
			fs := fields[entries[0].start:entries[0].end]
			require.Len(t, fs, 2)
			assert.Equal(t, "m", string(fs[0].name))
			assert.Equal(t, "7 abc", string(fs[0].value))
			assert.Equal(t, "x\r\ny", string(fs[1].value), "a value may hold CRLF")
			assert.Equal(t, "1-2", string(entries[1].id))
			assert.True(t, entries[1].deleted, "a null field list marks a deleted entry")
		})
	}
}

func TestReplyErrTellsNullsAndErrorReplies(t *testing.T) {
	for _, raw := range []string{"*-1\r\n", "_\r\n", "%-1\r\n"} {
		assert.ErrorIs(t, replyErr([]byte(raw)), redis.Nil, "%q is a null reply (BLOCK ran out)", raw)
	}
	err := replyErr([]byte("-NOGROUP No such key 'x' or consumer group 'g'\r\n"))
	var re redis.Error
	require.ErrorAs(t, err, &re, "an error reply is a redis.Error, like go-redis's typed ones")
	assert.True(t, isNoGroup(err))
	assert.True(t, isPermanentRedisErr(replyError("NOPERM no permissions")))
	err = replyErr([]byte("!11\r\nWRONGTYPE x\r\n"))
	assert.EqualError(t, err, "WRONGTYPE x")
	assert.NoError(t, replyErr([]byte("*1\r\n")))
}

func TestParseXReadRefusesBrokenReplies(t *testing.T) {
	for _, raw := range []string{
		"", "*", "*1\r\n", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*1\r\n$1\r\nm\r\n",
		"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$9\r\n1-1\r\n*0\r\n", ":1\r\n", "*1\r\n*2\r\n$1\r\ns\r\n*0\r\nextra",
		// Lengths: signs, -0, under -1, not digits, too long to be safe,
		// and a CR without its LF.
		"*+1\r\n*2\r\n$1\r\ns\r\n*0\r\n", "*-0\r\n", "*-2\r\n", "*1x\r\n", "*\r\n",
		"*1234567890123456789\r\n", "*1\r*2\r\n$1\r\ns\r\n*0\r\n",
	} {
		_, _, err := parseXRead([]byte(raw), nil, nil)
		assert.Error(t, err, "%q", raw)
	}
}

// FuzzParseXRead: the parser never panics nor reads past the reply, and
// every field it returns lies inside it.
func FuzzParseXRead(f *testing.F) {
	f.Add([]byte("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nm\r\n$3\r\n1 a\r\n"))
	f.Add([]byte("%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n_\r\n"))
	f.Add([]byte("*1\r\n*2\r\n+s\r\n*1\r\n*2\r\n+1-1\r\n%1\r\n+m\r\n+1 a\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, fields, err := parseXRead(raw, nil, nil)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.start > e.end || e.end > len(fields) {
				t.Fatalf("entry %q has fields [%d:%d] of %d", e.id, e.start, e.end, len(fields))
			}
		}
		for _, fl := range fields {
			if !bytes.Contains(raw, fl.name) || !bytes.Contains(raw, fl.value) {
				t.Fatalf("field %q=%q is not in the reply", fl.name, fl.value)
			}
		}
	})
}

// rawFields splits data at NUL bytes into field name, value, name, value
// ...: an arbitrary entry, repeated names included.
func rawFields(data []byte) []rawField {
	toks := bytes.Split(data, []byte{0})
	fs := make([]rawField, 0, len(toks)/2)
	for i := 0; i+1 < len(toks); i += 2 {
		fs = append(fs, rawField{name: toks[i], value: toks[i+1]})
	}
	return fs
}

// FuzzDecodeFieldsAgreesWithDecode: when the fast decoder accepts an
// entry, decode of its field map accepts it too, with the same message.
func FuzzDecodeFieldsAgreesWithDecode(f *testing.F) {
	decodeSeeds(f)
	f.Add([]byte("m\x001 a\x00p\x00x\x00p\x00y"))
	f.Add([]byte("m\x001 a\x00p\x00x\x00h:a\x00b\x00h:a\x00c"))
	f.Add([]byte("m\x00+1 a\x00p\x00x"))
	f.Add([]byte("m\x00001 a b\x00p\x00\x00key\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := rawFields(data)
		var fast backend.Message
		id, ok := decodeFields(fs, &fast, nil)
		if !ok {
			return
		}
		fast.ID = string(id)
		var slow backend.Message
		if err := decode("1-1", fieldMap(fs), &slow); err != nil {
			t.Fatalf("decodeFields accepted what decode refuses: %v", err)
		}
		if fast.ID != slow.ID || fast.Key != slow.Key || !bytes.Equal(fast.Payload, slow.Payload) ||
			(fast.Payload == nil) != (slow.Payload == nil) || !fast.PublishedAt.Equal(slow.PublishedAt) || len(fast.Headers) != len(slow.Headers) {
			t.Fatalf("decodeFields gave %+v, decode %+v", fast, slow)
		}
		for k, v := range slow.Headers {
			if fast.Headers[k] != v {
				t.Fatalf("header %q: decodeFields %q, decode %q", k, fast.Headers[k], v)
			}
		}
	})
}

func TestDecodeFieldsLeavesUnusualEntriesToDecode(t *testing.T) {
	tests := []struct {
		name string
		data string
	}{
		{name: "repeated payload", data: "m\x001 a\x00p\x00x\x00p\x00y"},
		{name: "repeated header", data: "m\x001 a\x00p\x00x\x00h:a\x00b\x00h:a\x00c"},
		{name: "signed time", data: "m\x00+1 a\x00p\x00x"},
		{name: "foreign field", data: "m\x001 a\x00p\x00x\x00other\x00v"},
		{name: "empty header name", data: "m\x001 a\x00p\x00x\x00h:\x00v"},
		{name: "no payload", data: "m\x001 a"},
		{name: "long time", data: "m\x001234567890123456789 a\x00p\x00x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m backend.Message
			_, ok := decodeFields(rawFields([]byte(tt.data)), &m, nil)
			assert.False(t, ok)
		})
	}
}

// TestRawReadsMatchTypedReads reads the same entries with the raw reply
// parser and with go-redis's typed XREADGROUP, on RESP2 and RESP3, a
// deleted entry and a payload holding every byte value included.
func TestRawReadsMatchTypedReads(t *testing.T) {
	u := redistest.URL(t)
	payload := make([]byte, 512)
	for i := range payload {
		payload[i] = byte(i)
	}
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			opts, err := redis.ParseURL(u)
			require.NoError(t, err)
			opts.Protocol = proto
			c := redis.NewClient(opts)
			defer c.Close()
			stream := fmt.Sprintf("resp-test:{%s-%d}", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
			defer c.Del(ctx, stream)
			require.NoError(t, c.XGroupCreateMkStream(ctx, stream, "g", "0").Err())
			msgs := []*backend.Message{
				{ID: "a b", Payload: payload, PublishedAt: time.UnixMilli(1700000000123)},
				{ID: "k", Key: "key\r\n", Headers: map[string]string{"m": "1", "h:": ""}, Payload: []byte{}, PublishedAt: time.UnixMilli(5)},
				{ID: "gone", Payload: []byte("x"), PublishedAt: time.UnixMilli(6)},
			}
			var ids []string
			for _, m := range msgs {
				id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: appendFields(nil, m, appendMeta(nil, m))}).Result()
				require.NoError(t, err)
				ids = append(ids, id)
			}
			// Deliver all, then delete the last: a re-read of the
			// pending list shows it without fields.
			require.NoError(t, c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}}).Err())
			require.NoError(t, c.XDel(ctx, stream, ids[2]).Err())
			typed, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, "0"}}).Result()
			require.NoError(t, err)
			var buf replyBuffer
			require.NoError(t, c.DoRawWriteTo(ctx, &buf, "XREADGROUP", "GROUP", "g", "c", "STREAMS", stream, "0").Err())
			entries, fields, err := parseXRead(buf.b, nil, nil)
			require.NoError(t, err)
			require.Len(t, entries, len(typed[0].Messages))
			for i, e := range entries {
				want := typed[0].Messages[i]
				require.Equal(t, want.ID, string(e.id))
				if want.Values == nil {
					assert.True(t, e.deleted, "entry %s was deleted", want.ID)
					continue
				}
				var fast, slow backend.Message
				id, ok := decodeFields(fields[e.start:e.end], &fast, nil)
				require.True(t, ok, "entry %s takes the fast path", want.ID)
				fast.ID = string(id)
				require.NoError(t, decode(want.ID, want.Values, &slow))
				assert.Equal(t, slow, fast, "entry %s decodes alike", want.ID)
				assert.Equal(t, msgs[i].Payload, fast.Payload, "entry %s: the payload is byte-exact", want.ID)
			}
		})
	}
}

func TestReplyBufferReadsBulkStringsInPlace(t *testing.T) {
	var w replyBuffer
	_, _ = w.Write([]byte("$3\r\n"))
	n, err := w.ReadFrom(&limited{r: strings.NewReader("abc\r\nrest"), n: 5})
	require.NoError(t, err)
	assert.EqualValues(t, 5, n)
	assert.Equal(t, "$3\r\nabc\r\n", string(w.b))
	n, err = w.ReadFrom(io.LimitReader(strings.NewReader("xy\r\nmore"), 4))
	require.NoError(t, err)
	assert.EqualValues(t, 4, n)
	assert.Equal(t, "$3\r\nabc\r\nxy\r\n", string(w.b), "an io.LimitedReader is read in place too")
	_, err = w.ReadFrom(failing{})
	assert.Error(t, err, "a read error comes back")
}

// limited is io.LimitReader without the io type, so ReadFrom takes its
// generic path.
type limited struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), l.n)]
	k, err := l.r.Read(p)
	l.n -= k
	return k, err
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("broken") }

func TestRawReadsNeedARoomyReadDeadline(t *testing.T) {
	const block = time.Second
	tests := []struct {
		name        string
		readTimeout time.Duration // as given to go-redis
		ctxTimeouts bool
		want        bool
	}{
		{name: "default timeout", readTimeout: 0, want: true},
		{name: "long timeout", readTimeout: 5 * time.Second, want: true},
		{name: "no timeout, ctx deadlines", readTimeout: -1, ctxTimeouts: true, want: true},
		{name: "no timeout, no ctx deadlines", readTimeout: -1, want: false},
		{name: "no deadline calls", readTimeout: -2, ctxTimeouts: true, want: false},
		{name: "short timeout", readTimeout: 1500 * time.Millisecond, ctxTimeouts: true, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: tt.readTimeout, ContextTimeoutEnabled: tt.ctxTimeouts})
			defer c.Close()
			assert.Equal(t, tt.want, rawReadsOK(c, block))
		})
	}
}

// TestTypedReadsStillDeliver runs a backend whose given read client cannot
// take raw reads (no read deadline at all) through a publish and a
// receive, so the typed read path stays covered.
func TestTypedReadsStillDeliver(t *testing.T) {
	ctx := context.Background()
	opts := redistest.Options(t)
	c := redis.NewClient(opts)
	defer c.Close()
	ro := *opts
	ro.ReadTimeout = -2
	rc := redis.NewClient(&ro)
	defer rc.Close()
	b, err := New(c, &Options{Prefix: fmt.Sprintf("typed%d", time.Now().UnixNano()), ReadClient: rc})
	require.NoError(t, err)
	defer b.Close()
	require.False(t, b.rawReads, "this read client takes typed reads")
	sub, err := b.Subscribe(ctx, "t", backend.SubscribeConfig{Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 10, MaxDeliveries: 3, Observer: observer.Nop()})
	require.NoError(t, err)
	defer sub.Close()
	want := &backend.Message{ID: "m1", Key: "k", Headers: map[string]string{"a": "b"}, Payload: []byte{0, 1, 2}, PublishedAt: time.UnixMilli(1700000000000)}
	require.NoError(t, b.Publish(ctx, "t", []*backend.Message{want}))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got []*backend.Message
	for len(got) == 0 && rctx.Err() == nil {
		got, err = sub.Receive(rctx, 10)
		require.NoError(t, err)
	}
	require.Len(t, got, 1)
	assert.Equal(t, want.ID, got[0].ID)
	assert.Equal(t, want.Key, got[0].Key)
	assert.Equal(t, want.Headers, got[0].Headers)
	assert.Equal(t, want.Payload, got[0].Payload)
	assert.True(t, want.PublishedAt.Equal(got[0].PublishedAt))
	require.NoError(t, sub.Ack(ctx, []backend.AckID{got[0].AckID}))
}

// BenchmarkParseXRead parses a reply of 100 entries as the bus writes
// them (meta and a 256-byte payload):
//
//	go test ./redisstream -run '^$' -bench ParseXRead
func BenchmarkParseXRead(b *testing.B) {
	raw := []byte("*1\r\n*2\r\n$10\r\nbus:{abcd}\r\n*100\r\n")
	payload := bytes.Repeat([]byte{'x'}, 256)
	for i := range 100 {
		id := fmt.Sprintf("1700000000000-%d", i)
		meta := fmt.Sprintf("1700000000000 01JABCDEFGHJKMNPQRSTVWXY%02d", i)
		raw = fmt.Appendf(raw, "*2\r\n$%d\r\n%s\r\n*4\r\n$1\r\nm\r\n$%d\r\n%s\r\n$1\r\np\r\n$%d\r\n%s\r\n", len(id), id, len(meta), meta, len(payload), payload)
	}
	var entries []rawEntry
	var fields []rawField
	b.ReportAllocs()
	for b.Loop() {
		var err error
		entries, fields, err = parseXRead(raw, entries[:0], fields[:0])
		if err != nil || len(entries) != 100 {
			b.Fatalf("parsed %d entries: %v", len(entries), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/entry")
}
