package bus

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A read of the dead-letter topic that misses a head this subscription
// just stored (a replica behind its leader) does not lift its hold: the
// hold stays until a read shows it, and a lift ends it either way.
func TestKeyHoldsKeepAHoldTheReadMissed(t *testing.T) {
	h := &keyHolds{heads: map[string]keyHold{}}
	h.set("k42", "head-42")
	h.replace(map[string]keyHold{"k7": {head: "head-7"}})
	_, held := h.get("k42")
	assert.True(t, held, "a hold the read missed is kept")
	_, held = h.get("k7")
	assert.True(t, held, "a hold the read shows is taken")

	h.replace(map[string]keyHold{"k42": {head: "head-42"}})
	h.replace(map[string]keyHold{})
	_, held = h.get("k42")
	assert.False(t, held, "once a read showed it, the reads alone say whether it holds")

	h.set("k1", "head-1")
	h.lift("k1", "head-1")
	h.replace(map[string]keyHold{})
	_, held = h.get("k1")
	assert.False(t, held, "a lifted hold is not brought back")
}
