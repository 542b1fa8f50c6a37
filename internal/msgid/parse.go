package msgid

import (
	"encoding/binary"
	"unsafe"
)

// The text of every ID this process makes from position tailAt on (the
// random bytes 9 to 15: "-" after 2 digits, then 12) is the same: tailLo
// and tailHi are its bytes 21-28 and 28-35 as little-endian words, which
// framed compares.
var tailLo, tailHi uint64

const tailAt = 21

func init() {
	var u [16]byte
	fill(&u, 0)
	id := Format(u)
	tailLo, tailHi = word(id, tailAt), word(id, 28)
}

// word is id[at:at+8] as a little-endian word.
func word(id string, at int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(id[at:at+8]), 8))
}

// Parse reports whether id is exactly an ID that this process's generator
// made or would make (New, Batch), and returns its value: the
// (millisecond << 16 | sequence) number it was made from. Values are
// unique: two IDs with one value are the same string. An ID of another
// process, or any other string, returns false.
func Parse(id string) (uint64, bool) {
	if !framed(id) {
		return 0, false
	}
	ms, ok := parseMS(id)
	if !ok {
		return 0, false
	}
	sq, ok := parseSeq(id)
	if !ok {
		return 0, false
	}
	return ms<<16 | sq, true
}

// framed reports whether id has the length, the dashes and the random
// tail of this process's IDs.
func framed(id string) bool {
	return len(id) == 36 && word(id, tailAt) == tailLo && word(id, 28) == tailHi && id[8] == '-' && id[13] == '-' && id[18] == '-'
}

// parseMS reads bytes 0 to 5 of a framed ID: 48 bits of milliseconds.
func parseMS(id string) (uint64, bool) {
	_ = id[12] // one bounds check for the reads below
	var ms, bad uint64
	for _, at := range [6]int{0, 2, 4, 6, 9, 11} {
		hi, lo := unhexes[id[at]], unhexes[id[at+1]]
		bad |= uint64(hi | lo)
		ms = ms<<8 | uint64(hi<<4|lo)
	}
	return ms, bad <= 0x0f
}

// parseSeq reads bytes 6 to 8 of a framed ID: the version nibble, 16 bits
// of sequence, and the variant and 2 random bits around its last 4.
func parseSeq(id string) (uint64, bool) {
	_ = id[20] // one bounds check for the reads below
	h0, h1, h2, h3 := unhexes[id[14]], unhexes[id[15]], unhexes[id[16]], unhexes[id[17]]
	h4, h5 := unhexes[id[19]], unhexes[id[20]]
	u2 := h4<<4 | h5
	if h0|h1|h2|h3|h4|h5 > 0x0f || h0 != 0x7 || u2&0xc3 != 0x80|random[0]&0x03 {
		return 0, false
	}
	return uint64(h1)<<12 | uint64(h2)<<8 | uint64(h3)<<4 | uint64(u2>>2)&0x0f, true
}

// Parser is Parse for a run of IDs that mostly share their millisecond,
// as the IDs of one Batch do: it remembers the first 13 characters of the
// last ID whose millisecond it read (already checked), and reads only the
// sequence of an ID that starts with them. It returns what Parse returns.
// Its zero value is ready to use; it is not safe for concurrent use.
type Parser struct {
	// lo and hi are id[0:8] and id[5:13] of the last ID whose
	// millisecond was read, as words; set says there was one.
	lo, hi uint64
	set    bool
	ms     uint64
}

// Parse is Parse.
func (p *Parser) Parse(id string) (uint64, bool) {
	if !framed(id) {
		return 0, false
	}
	if lo, hi := word(id, 0), word(id, 5); !p.set || lo != p.lo || hi != p.hi {
		ms, ok := parseMS(id)
		if !ok {
			return 0, false
		}
		p.lo, p.hi, p.set, p.ms = lo, hi, true, ms
	}
	sq, ok := parseSeq(id)
	if !ok {
		return 0, false
	}
	return p.ms<<16 | sq, true
}

// unhexes decodes the lower-case hex digits that Format writes; every
// other byte is 0xff.
var unhexes = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := range 16 {
		t[hexDigits[i]] = byte(i)
	}
	return t
}()
