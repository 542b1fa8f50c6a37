package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/middleware"
)

func TestValidateTopicAcceptsAndRejects(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		ok    bool
	}{
		{"simple", "orders", true},
		{"dotted", "orders.created.v1", true},
		{"all allowed", "a-b_c:d.E9", true},
		{"max length", strings.Repeat("a", bus.MaxTopicLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("a", bus.MaxTopicLen+1), false},
		{"leading dot", ".orders", false},
		{"trailing dot", "orders.", false},
		{"double dot", "orders..created", false},
		{"space", "orders created", false},
		{"wildcard", "orders.*", false},
		{"gt", "orders.>", false},
		{"slash", "orders/created", false},
		{"unicode", "заказы", false},
		{"nul", "a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := bus.ValidateTopic(tt.topic)
			if tt.ok {
				assert.NoError(t, err, "topic %q should be valid", tt.topic)
				return
			}
			require.Error(t, err, "topic %q should be rejected", tt.topic)
			assert.ErrorIs(t, err, bus.ErrInvalidTopic)
		})
	}
}

func TestInvalidTopicNamesTheCharacterTypedAndItsPosition(t *testing.T) {
	tests := []struct{ topic, want string }{
		{"ördërs", `"ördërs" has character 'ö' at character 1 (allowed: ASCII letters, digits, '.', '_', '-' and ':')`},
		{"ordërs", `has character 'ë' at character 4`},
		{"orders created", `has character ' ' at character 7`},
		{"z\xffx", `has byte 0xff, not UTF-8 text, at character 2`},
	}
	for _, tt := range tests {
		err := bus.ValidateTopic(tt.topic)
		require.ErrorIs(t, err, bus.ErrInvalidTopic, tt.topic)
		assert.Contains(t, err.Error(), tt.want, "%q: the error names the character and its position in characters", tt.topic)
	}
}

// rejectingBackend fails the test if the bus reaches it: validation must
// happen before any I/O.
type countingBackend struct {
	nopBackend
	publishes int
}

func (c *countingBackend) Publish(context.Context, string, []*bus.BackendMessage) error {
	c.publishes++
	return nil
}

func TestPublishRejectsBadInputBeforeIO(t *testing.T) {
	big := make([]byte, bus.DefaultMaxPayload+1)
	tests := []struct {
		name    string
		topic   string
		msgs    []*bus.Message
		want    error
		failIdx []int
	}{
		{"bad topic", "a..b", []*bus.Message{{Payload: []byte("x")}}, bus.ErrInvalidTopic, nil},
		{"nil message", "t", []*bus.Message{nil}, bus.ErrInvalidMessage, []int{0}},
		{"header key with space", "t", []*bus.Message{{Headers: map[string]string{"a b": "v"}}}, bus.ErrInvalidMessage, []int{0}},
		{"empty header key", "t", []*bus.Message{{Headers: map[string]string{"": "v"}}}, bus.ErrInvalidMessage, []int{0}},
		{"header value not UTF-8", "t", []*bus.Message{{Headers: map[string]string{"k": "a\xffb"}}}, bus.ErrInvalidMessage, []int{0}},
		{"id with space", "t", []*bus.Message{{ID: "x1 "}}, bus.ErrInvalidMessage, []int{0}},
		{"id with LF", "t", []*bus.Message{{ID: "x1\n"}}, bus.ErrInvalidMessage, []int{0}},
		{"id non-ASCII", "t", []*bus.Message{{ID: "zé"}}, bus.ErrInvalidMessage, []int{0}},
		{"id too long", "t", []*bus.Message{{ID: strings.Repeat("i", bus.MaxIDLen+1)}}, bus.ErrInvalidMessage, []int{0}},
		{"key too long", "t", []*bus.Message{{Key: strings.Repeat("k", bus.MaxKeyLen+1)}}, bus.ErrInvalidMessage, []int{0}},
		{"key not UTF-8", "t", []*bus.Message{{Key: "k\xff"}}, bus.ErrInvalidMessage, []int{0}},
		{"too many headers", "t", []*bus.Message{{Headers: manyHeaders(bus.MaxHeaders+1, 1)}}, bus.ErrInvalidMessage, []int{0}},
		{"headers too large", "t", []*bus.Message{{Headers: map[string]string{"big": strings.Repeat("v", bus.MaxHeaderBytes)}}}, bus.ErrInvalidMessage, []int{0}},
		{"reserved bus prefix", "t", []*bus.Message{{Headers: map[string]string{"Bus-Dlq-Reason": "x"}}}, bus.ErrInvalidMessage, []int{0}},
		{"reserved nats prefix", "t", []*bus.Message{{Headers: map[string]string{"Nats-Msg-Id": "x"}}}, bus.ErrInvalidMessage, []int{0}},
		{"payload too large", "t", []*bus.Message{{Payload: big}}, bus.ErrPayloadTooLarge, []int{0}},
		{"one bad in batch", "t", []*bus.Message{{Payload: []byte("ok")}, {Payload: big}, {Payload: []byte("ok")}}, bus.ErrPayloadTooLarge, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &countingBackend{}
			b := bus.New(be)
			defer b.Close(context.Background())
			err := b.Publish(context.Background(), tt.topic, tt.msgs...)
			require.Error(t, err, "publish should be rejected")
			assert.ErrorIs(t, err, tt.want)
			assert.Zero(t, be.publishes, "the backend must not be called for invalid input")
			if tt.failIdx != nil {
				var pe *bus.PublishError
				require.True(t, errors.As(err, &pe), "error should be a *PublishError, got %T", err)
				var got []int
				for _, f := range pe.Failed {
					got = append(got, f.Index)
				}
				assert.Equal(t, tt.failIdx, got, "failed indexes")
				assert.True(t, pe.Rejected, "validation failures reject the whole batch")
			}
		})
	}
}

// manyHeaders returns n headers whose values are size bytes each.
func manyHeaders(n, size int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h["h"+strconv.Itoa(i)] = strings.Repeat("v", size)
	}
	return h
}

func TestPublishAcceptsTheWholeContentRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  *bus.Message
	}{
		{"id at the bound", &bus.Message{ID: strings.Repeat("i", bus.MaxIDLen)}},
		{"id of every visible ASCII byte", &bus.Message{ID: "!\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~"}},
		{"key with spaces, CR, LF, colon and NUL", &bus.Message{Key: " k\r\nX: 1\x00 "}},
		{"key non-ASCII UTF-8", &bus.Message{Key: "заказ-7 ✓"}},
		{"key at the bound", &bus.Message{Key: strings.Repeat("k", bus.MaxKeyLen)}},
		{"header values with surrounding spaces and line breaks", &bus.Message{Headers: map[string]string{"a": "  v  ", "b": "x\r\ny", "c": "\x00", "d": ""}}},
		{"header keys differing only by case", &bus.Message{Headers: map[string]string{"Trace": "1", "trace": "2"}}},
		{"header named Status on an empty payload", &bus.Message{Headers: map[string]string{"Status": "404"}}},
		{"max headers", &bus.Message{Headers: manyHeaders(bus.MaxHeaders, 1)}},
		{"header bytes at the bound", &bus.Message{Headers: map[string]string{"big": strings.Repeat("v", bus.MaxHeaderBytes-3)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			be := &countingBackend{}
			b := bus.New(be)
			defer b.Close(context.Background())
			require.NoError(t, b.Publish(context.Background(), "t", tt.msg), "the content rule accepts it")
			assert.Equal(t, 1, be.publishes)
		})
	}
}

func TestPublishAssignsTimeOrderedIDs(t *testing.T) {
	be := &countingBackend{}
	b := bus.New(be)
	defer b.Close(context.Background())
	msgs := make([]*bus.Message, 100)
	for i := range msgs {
		msgs[i] = &bus.Message{Payload: []byte{byte(i)}}
	}
	msgs[5].ID = "caller-chosen"
	require.NoError(t, b.Publish(context.Background(), "t", msgs...))
	assert.Equal(t, "caller-chosen", msgs[5].ID, "a caller's ID must be kept")
	prev := ""
	for i, m := range msgs {
		if i == 5 {
			continue
		}
		require.Len(t, m.ID, 36, "UUID string form")
		assert.Equal(t, byte('7'), m.ID[14], "UUID version 7")
		assert.Greater(t, m.ID, prev, "IDs must increase in creation order")
		prev = m.ID
	}
	assert.Equal(t, 1, be.publishes, "one batch, one backend call")
}

func TestWithMaxPayloadLowersTheLimit(t *testing.T) {
	be := &countingBackend{}
	b := bus.New(be, bus.WithMaxPayload(10))
	defer b.Close(context.Background())
	require.NoError(t, b.Publish(context.Background(), "t", &bus.Message{Payload: make([]byte, 10)}))
	err := b.Publish(context.Background(), "t", &bus.Message{Payload: make([]byte, 11)})
	assert.ErrorIs(t, err, bus.ErrPayloadTooLarge)
	assert.Equal(t, 1, be.publishes)
}

func TestPublishAfterCloseReturnsErrClosed(t *testing.T) {
	b := bus.New(&countingBackend{})
	require.NoError(t, b.Close(context.Background()))
	err := b.Publish(context.Background(), "t", &bus.Message{})
	assert.ErrorIs(t, err, bus.ErrClosed)
	assert.NoError(t, b.Close(context.Background()), "closing twice is fine")
}

func TestInvalidBusOptionIsReturnedByEveryCall(t *testing.T) {
	b := bus.New(&countingBackend{}, bus.WithMaxPayload(-1))
	err := b.Publish(context.Background(), "t", &bus.Message{})
	assert.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = b.Subscribe(context.Background(), "t", func(context.Context, *bus.Delivery) error { return nil })
	assert.ErrorIs(t, err, bus.ErrInvalidOption)
	require.NoError(t, b.Close(context.Background()))
}

func TestOpenUnknownSchemeListsKnownOnes(t *testing.T) {
	_, err := bus.Open(context.Background(), "kafka://user:secret@host:9092")
	require.Error(t, err)
	assert.ErrorIs(t, err, bus.ErrInvalidOption)
	assert.Contains(t, err.Error(), "mem", "the error lists the known schemes")
	assert.NotContains(t, err.Error(), "secret", "the URL is redacted")
}

func TestOpenRedactsTokenOnlyUserInfo(t *testing.T) {
	_, err := bus.Open(context.Background(), "kafka://s3cr3t-token@host:9092")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-token", "a token in the user part is redacted")
}

func TestRejectIsDetectedThroughWrapping(t *testing.T) {
	base := errors.New("bad input")
	err := bus.Reject(base)
	assert.True(t, bus.IsRejected(err))
	assert.True(t, bus.IsRejected(errors.Join(errors.New("x"), err)))
	assert.ErrorIs(t, err, base)
	assert.False(t, bus.IsRejected(base))
	assert.NoError(t, bus.Reject(nil))
}

// The word-at-a-time ID check agrees with a byte loop for every byte
// value at every position of IDs of every length up to three words.
func TestVisibleASCIIAgreesWithByteLoop(t *testing.T) {
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x21 || s[i] > 0x7e {
				return false
			}
		}
		return true
	}
	for n := 1; n <= 24; n++ {
		base := []byte(strings.Repeat("a", n))
		require.True(t, bus.VisibleASCII(string(base)))
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := append([]byte(nil), base...)
				b[pos] = byte(c)
				require.Equal(t, slow(string(b)), bus.VisibleASCII(string(b)), "len %d, byte %#x at %d", n, c, pos)
				if pos+1 < n { // a neighbour at the edges of the range
					b[pos+1] = 0x7e
					require.Equal(t, slow(string(b)), bus.VisibleASCII(string(b)), "len %d, byte %#x at %d then 0x7e", n, c, pos)
					b[pos+1] = 0x21
					require.Equal(t, slow(string(b)), bus.VisibleASCII(string(b)), "len %d, byte %#x at %d then 0x21", n, c, pos)
				}
			}
		}
	}
}

// ExpiresAt travels in a reserved header: a message that sets it may have
// one user header fewer, and the limit says so before any I/O.
func TestExpiresAtTakesOneHeader(t *testing.T) {
	b, err := bus.Open(context.Background(), "mem://")
	require.NoError(t, err)
	defer b.Close(context.Background())
	h := map[string]string{}
	for i := range bus.MaxHeaders {
		h[fmt.Sprintf("h%d", i)] = "v"
	}
	require.NoError(t, b.Publish(context.Background(), "t", &bus.Message{Headers: h}), "the full header count without ExpiresAt")
	err = b.Publish(context.Background(), "t", &bus.Message{Headers: h, ExpiresAt: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, bus.ErrInvalidMessage)
	assert.Contains(t, err.Error(), fmt.Sprintf("more than %d", bus.MaxHeaders-1))
}

func TestNackMarksAndUnwraps(t *testing.T) {
	base := errors.New("429")
	err := fmt.Errorf("call api: %w", bus.Nack(base, 40*time.Second))
	d, ok := backend.RetryAfterOf(err)
	require.True(t, ok)
	assert.Equal(t, 40*time.Second, d)
	assert.ErrorIs(t, err, base, "the cause stays reachable")
	assert.NoError(t, bus.Nack(nil, time.Second))
	_, ok = backend.RetryAfterOf(base)
	assert.False(t, ok)
	d, _ = backend.RetryAfterOf(bus.Nack(base, -time.Second))
	assert.Zero(t, d, "a negative delay counts as 0")
}

// The backend learns which IDs Publish generated (IDGenerated), so it may
// skip deduplicating them: those of the messages that had none, also
// through publish middleware that copies or reorders them, and never an
// ID the caller set, nor one the bus assigned in an earlier call and the
// caller publishes again.
func TestPublishMarksTheIDsItGenerated(t *testing.T) {
	reverse := func(next bus.Publisher) bus.Publisher {
		return middleware.PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
			out := make([]*bus.Message, len(msgs))
			for i, m := range msgs {
				cp := *m
				out[len(msgs)-1-i] = &cp
			}
			return next.Publish(ctx, topic, out...)
		})
	}
	tests := []struct {
		name string
		opts []bus.Option
	}{
		{"plain", nil},
		{"through middleware that copies and reorders", []bus.Option{bus.WithPublishMiddleware(reverse)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeBackend()
			b := bus.New(be, tt.opts...)
			defer b.Close(context.Background())
			msgs := []*bus.Message{{}, {ID: "caller-set"}, {}, {}}
			require.NoError(t, b.Publish(context.Background(), "t", msgs...))
			again := &bus.Message{ID: msgs[0].ID}
			require.NoError(t, b.Publish(context.Background(), "t", msgs[2], again))
			gen := map[string][]bool{}
			for _, m := range be.published["t"] {
				gen[m.ID] = append(gen[m.ID], m.IDGenerated)
			}
			assert.Equal(t, []bool{true, false}, gen[msgs[0].ID], "generated in the first call, set by the caller in the second")
			assert.Equal(t, []bool{false}, gen["caller-set"], "a caller-set ID is not marked")
			assert.Equal(t, []bool{true, false}, gen[msgs[2].ID], "the same *Message published again carries an ID the caller now holds")
			assert.Equal(t, []bool{true}, gen[msgs[3].ID], "the last generated ID")
		})
		t.Run(tt.name+", async", func(t *testing.T) {
			be := newFakeBackend()
			b := bus.New(be, tt.opts...)
			defer b.Close(context.Background())
			ctx := context.Background()
			generated, set := &bus.Message{}, &bus.Message{ID: "caller-set"}
			require.NoError(t, b.PublishAsync(ctx, "t", generated).Get(ctx))
			require.NoError(t, b.PublishAsync(ctx, "t", set).Get(ctx))
			require.NoError(t, b.PublishAsync(ctx, "t", &bus.Message{ID: generated.ID}).Get(ctx))
			gen := map[string][]bool{}
			for _, m := range be.published["t"] {
				gen[m.ID] = append(gen[m.ID], m.IDGenerated)
			}
			assert.Equal(t, []bool{true, false}, gen[generated.ID], "generated by PublishAsync, then set by the caller")
			assert.Equal(t, []bool{false}, gen["caller-set"], "a caller-set ID is not marked")
		})
	}
}
