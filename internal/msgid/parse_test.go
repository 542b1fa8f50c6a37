package msgid

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseReadsBackEveryIDOfThisProcess(t *testing.T) {
	ids := Batch(300) // crosses sequence nibbles, maybe a millisecond
	first, ok := Parse(ids[:36])
	require.True(t, ok, "a batch ID parses")
	for i := range 300 {
		v, ok := Parse(ids[36*i : 36*i+36])
		require.True(t, ok, "ID %d parses", i)
		assert.Equal(t, first+uint64(i), v, "ID %d has its reserved value", i)
	}
	var p Parser
	for i := range 300 {
		v, ok := p.Parse(ids[36*i : 36*i+36])
		require.True(t, ok, "ID %d parses with a Parser", i)
		assert.Equal(t, first+uint64(i), v, "ID %d has its reserved value with a Parser", i)
	}
	id := New()
	v, ok := Parse(id)
	require.True(t, ok)
	var u [16]byte
	fill(&u, v)
	assert.Equal(t, id, Format(u), "the value renders the same ID")
}

// TestParseIsExact checks that every string that differs from an ID by
// one character either does not parse or is the ID of its value: no two
// strings share a value.
func TestParseIsExact(t *testing.T) {
	id := New()
	const alphabet = "0123456789abcdefABCDEF-gz "
	for i := range len(id) {
		for _, c := range []byte(alphabet) {
			if id[i] == c {
				continue
			}
			m := id[:i] + string(c) + id[i+1:]
			v, ok := Parse(m)
			// A Parser that has just read id reads m from its remembered
			// millisecond when m starts like id: it must agree.
			var p Parser
			_, _ = p.Parse(id)
			pv, pok := p.Parse(m)
			assert.Equal(t, ok, pok, "Parser and Parse agree on whether %q parses", m)
			assert.Equal(t, v, pv, "Parser and Parse agree on the value of %q", m)
			if !ok {
				continue
			}
			var u [16]byte
			fill(&u, v)
			assert.Equal(t, m, Format(u), "a parsed string is the ID of its value (position %d, %q)", i, c)
		}
	}
	assert.True(t, func() bool { _, ok := Parse(id); return ok }())
	for _, bad := range []string{"", "x", strings.ToUpper(id), id + "0", id[:35], id[:13] + "x" + id[14:], "order-1"} {
		_, ok := Parse(bad)
		assert.False(t, ok, "%q is not an ID of this process", bad)
		var p Parser
		_, _ = p.Parse(id)
		_, ok = p.Parse(bad)
		assert.False(t, ok, "%q is not an ID of this process for a Parser either", bad)
	}
	var other [16]byte
	fill(&other, 1)
	other[15] ^= 0xff // the random tail of another process
	_, ok := Parse(Format(other))
	assert.False(t, ok, "another process's ID")
	other[15] ^= 0xff
	other[8] ^= 0x01 // one of the two random bits of the variant byte
	_, ok = Parse(Format(other))
	assert.False(t, ok, "another process's ID that differs in the variant byte only")
}

// A Parser that reads the IDs of a Batch in order recognises each next
// one by its text; any other string that follows is read in full.
func TestParserReadsTheNextIDExactly(t *testing.T) {
	ids := Batch(3)
	id0, id1, id2 := ids[:36], ids[36:72], ids[72:]
	v0, ok := Parse(id0)
	require.True(t, ok)
	const alphabet = "0123456789abcdefABCDEF-gz "
	for i := range len(id1) {
		for _, c := range []byte(alphabet) {
			if id1[i] == c {
				continue
			}
			m := id1[:i] + string(c) + id1[i+1:]
			v, ok := Parse(m)
			var p Parser
			_, _ = p.Parse(id0)
			pv, pok := p.Parse(m)
			assert.Equal(t, ok, pok, "after %q, Parser and Parse agree on whether %q parses", id0, m)
			assert.Equal(t, v, pv, "after %q, Parser and Parse agree on the value of %q", id0, m)
		}
	}
	var p Parser
	for i, id := range []string{id0, id1, id2, id1, id2} {
		v, ok := p.Parse(id)
		want, _ := Parse(id)
		require.True(t, ok, "ID %d parses", i)
		assert.Equal(t, want, v, "ID %d has its value, in order or not", i)
	}
	assert.Equal(t, v0+2, func() uint64 { v, _ := Parse(id2); return v }(), "the batch's values are consecutive")
}
