package msgid

import "unsafe"

// The text of every ID this process makes from position tailAt on (the
// random bytes 9 to 15: "-" after 2 digits, then 12) is the same: tailLo
// and tailHi are its bytes 21-28 and 28-35 as little-endian words, which
// framed compares.
var tailLo, tailHi uint64

const tailAt = 21

func init() {
	var u [16]byte
	fill(&u, 0)
	b := text(Format(u))
	tailLo, tailHi = le.Uint64(b[tailAt:]), le.Uint64(b[28:])
}

// text is the text of an ID: id, viewed in place when it has the length
// of one (nil otherwise), so that reading it needs no bounds checks.
func text(id string) *[36]byte {
	if len(id) != 36 {
		return nil
	}
	return (*[36]byte)(unsafe.Pointer(unsafe.StringData(id)))
}

// Parse reports whether id is exactly an ID that this process's generator
// made or would make (New, Batch), and returns its value: the
// (millisecond << 16 | sequence) number it was made from. Values are
// unique: two IDs with one value are the same string. An ID of another
// process, or any other string, returns false.
func Parse(id string) (uint64, bool) {
	b := text(id)
	if b == nil || !framed(b) {
		return 0, false
	}
	ms, ok := parseMS(b)
	if !ok {
		return 0, false
	}
	sq, ok := parseSeq(b)
	if !ok {
		return 0, false
	}
	return ms<<16 | sq, true
}

// framed reports whether b has the dashes and the random tail of this
// process's IDs.
func framed(b *[36]byte) bool {
	return le.Uint64(b[tailAt:]) == tailLo && le.Uint64(b[28:]) == tailHi && b[8] == '-' && b[13] == '-' && b[18] == '-'
}

// parseMS reads bytes 0 to 5 of a framed ID: 48 bits of milliseconds.
func parseMS(b *[36]byte) (uint64, bool) {
	var ms, bad uint64
	for _, at := range [6]int{0, 2, 4, 6, 9, 11} {
		hi, lo := unhexes[b[at]], unhexes[b[at+1]]
		bad |= uint64(hi | lo)
		ms = ms<<8 | uint64(hi<<4|lo)
	}
	return ms, bad <= 0x0f
}

// parseSeq reads bytes 6 to 8 of a framed ID: the version nibble, 16 bits
// of sequence, and the variant and 2 random bits around its last 4.
func parseSeq(b *[36]byte) (uint64, bool) {
	h1, h2, h3, h4, h5 := unhexes[b[15]], unhexes[b[16]], unhexes[b[17]], unhexes[b[19]], unhexes[b[20]]
	u2 := h4<<4 | h5
	if b[14] != '7' || h1|h2|h3|h4|h5 > 0x0f || u2&0xc3 != 0x80|random[0]&0x03 {
		return 0, false
	}
	return uint64(h1)<<12 | uint64(h2)<<8 | uint64(h3)<<4 | uint64(u2>>2)&0x0f, true
}

// Parser is Parse for a run of IDs that mostly share their millisecond,
// as the IDs of one Batch do: it remembers the first 13 characters of the
// last ID whose millisecond it read (already checked), and reads only the
// sequence of an ID that starts with them. And it remembers the value of
// the last ID it read: an ID that is, character for character, the text
// of the next value in the same millisecond (the next ID of a Batch) is
// recognised by comparing five words, without reading a digit. It returns
// what Parse returns. Its zero value is ready to use; it is not safe for
// concurrent use.
type Parser struct {
	// lo and hi are id[0:8] and id[5:13] of the last ID whose
	// millisecond was read, as words; set says there was one.
	lo, hi uint64
	set    bool
	ms     uint64
	// last is the value of the last ID read, of millisecond ms (0: none
	// since the millisecond was last read).
	last uint64
}

// Parse is Parse.
func (p *Parser) Parse(id string) (uint64, bool) {
	b := text(id)
	if b == nil {
		return 0, false
	}
	if v := p.last + 1; p.last != 0 && v>>16 == p.ms && le.Uint64(b[13:]) == seqWord(v) &&
		le.Uint64(b[0:]) == p.lo && le.Uint64(b[5:]) == p.hi && le.Uint64(b[tailAt:]) == tailLo && le.Uint64(b[28:]) == tailHi {
		// Every character is the next value's: bytes 0-12 are those of
		// the millisecond's ID read before, 13-20 the sequence rendered
		// here, 21-35 this process's tail.
		p.last = v
		return v, true
	}
	if !framed(b) {
		return 0, false
	}
	if lo, hi := le.Uint64(b[0:]), le.Uint64(b[5:]); !p.set || lo != p.lo || hi != p.hi {
		ms, ok := parseMS(b)
		if !ok {
			return 0, false
		}
		p.lo, p.hi, p.set, p.ms, p.last = lo, hi, true, ms, 0
	}
	sq, ok := parseSeq(b)
	if !ok {
		return 0, false
	}
	p.last = p.ms<<16 | sq
	return p.last, true
}

// seqWord is bytes 13 to 20 of the ID of value v, as a word: the dash,
// the version nibble and 12 bits of sequence, the dash, and the variant
// byte with the last 4 bits of sequence, as Batch writes them.
func seqWord(v uint64) uint64 {
	sq := v & 0xffff
	return '-' | uint64(hexPairs[0x70|byte(sq>>12)&0x0f])<<8 | uint64(hexPairs[byte(sq>>4)])<<24 |
		'-'<<40 | uint64(hexPairs[0x80|byte(sq&0x0f)<<2|random[0]&0x03])<<48
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
