package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
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
		{"header value with LF", "t", []*bus.Message{{Headers: map[string]string{"k": "a\nb"}}}, bus.ErrInvalidMessage, []int{0}},
		{"header value with CR", "t", []*bus.Message{{Headers: map[string]string{"k": "a\rb"}}}, bus.ErrInvalidMessage, []int{0}},
		{"header value with NUL", "t", []*bus.Message{{Headers: map[string]string{"k": "a\x00b"}}}, bus.ErrInvalidMessage, []int{0}},
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
	assert.ErrorIs(t, err, bus.ErrUnknownScheme)
	assert.Contains(t, err.Error(), "mem", "the error lists the known schemes")
	assert.NotContains(t, err.Error(), "secret", "the URL is redacted")
}

func TestOpenRedactsTokenOnlyUserInfo(t *testing.T) {
	_, err := bus.Open(context.Background(), "kafka://s3cr3t-token@host:9092")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t-token", "a token in the user part is redacted")
}

func TestPermanentIsDetectedThroughWrapping(t *testing.T) {
	base := errors.New("bad input")
	err := bus.Permanent(base)
	assert.True(t, bus.IsPermanent(err))
	assert.True(t, bus.IsPermanent(errors.Join(errors.New("x"), err)))
	assert.ErrorIs(t, err, base)
	assert.False(t, bus.IsPermanent(base))
	assert.NoError(t, bus.Permanent(nil))
}
