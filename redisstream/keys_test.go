package redisstream

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStreamKeysShareSlotWithDefaultDeadLetterTopic(t *testing.T) {
	tests := []struct {
		topic, want string
	}{
		{"orders", "bus:{orders}"},
		{"orders.dlq", "bus:{orders}.dlq"},
		{"orders.dlq.dlq", "bus:{orders}.dlq.dlq"},
		{"a.b:c", "bus:{a.b:c}"},
		{".dlq", "bus:{.dlq}"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, streamKey("bus", tt.topic), "key of %q", tt.topic)
	}
	assert.Equal(t, slotOf(streamKey("bus", "orders")), slotOf(streamKey("bus", "orders.dlq")))
	assert.Equal(t, uint16(0x31C3), crc16("123456789"), "CRC16/XMODEM check value")
	assert.Equal(t, uint16(12182), slotOf("foo"), "slot of foo as Redis computes it")
}

func TestIDOrdering(t *testing.T) {
	assert.True(t, lessID("1-5", "2-0"))
	assert.True(t, lessID("2-1", "2-10"))
	assert.False(t, lessID("3-0", "3-0"))
	assert.Equal(t, "5-8", nextID("5-7"))
}
