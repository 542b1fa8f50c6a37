// Package msgid generates time-ordered unique message IDs (UUID version 7,
// RFC 9562) quickly and without locks on the hot path.
package msgid

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"
)

// seq packs the last millisecond used (upper 48 bits) and a sequence
// within it (lower 16 bits), so that IDs from one process sort in creation
// order even within the same millisecond.
var (
	seq    atomic.Uint64 // (unix ms << 16) | sequence
	random [8]byte       // per-process random tail
)

func init() {
	if _, err := rand.Read(random[:]); err != nil {
		panic("msgid: crypto/rand: " + err.Error())
	}
}

const hexDigits = "0123456789abcdef"

// New returns a UUIDv7 string such as "0190a6e2-7f3c-7a01-8c2e-1b4d5e6f7a8b".
// IDs created by one process are strictly increasing.
func New() string {
	var u [16]byte
	Fill(&u)
	return Format(u)
}

// Fill writes a new UUIDv7 into u.
func Fill(u *[16]byte) {
	fill(u, reserve(1))
}

// Batch returns n new increasing IDs concatenated in one string of 36*n
// bytes, built with one clock read and one allocation; ID i is
// ids[36*i : 36*i+36].
func Batch(n int) string {
	if n <= 0 {
		return ""
	}
	first := reserve(uint64(n))
	b := make([]byte, 36*n)
	// The IDs as an array of texts: their reads and writes below need no
	// bounds checks.
	ids := unsafe.Slice((*[36]byte)(unsafe.Pointer(&b[0])), n)
	var u [16]byte
	fill(&u, first)
	format(ids[0][:], u)
	ms := first >> 16
	for i := 1; i < len(ids); i++ {
		cur := &ids[i]
		v := first + uint64(i)
		if v>>16 != ms {
			// The sequence borrowed the next millisecond: full render.
			fill(&u, v)
			format(cur[:], u)
			ms = v >> 16
			continue
		}
		// Same millisecond: only the sequence bits (bytes 6 to 8, text
		// positions 14-15, 16-17 and 19-20) differ from the previous ID,
		// which is copied whole.
		*cur = ids[i-1]
		sq := v & 0xffff
		le.PutUint16(cur[14:], hexPairs[0x70|byte(sq>>12)&0x0f])
		le.PutUint16(cur[16:], hexPairs[byte(sq>>4)])
		le.PutUint16(cur[19:], hexPairs[0x80|byte(sq&0x0f)<<2|random[0]&0x03])
	}
	// b is never written again: the string shares its bytes.
	return unsafe.String(&b[0], len(b))
}

// le reads and writes the words Batch copies.
var le = binary.LittleEndian

// hexPairs holds the two hex digits of each byte value, as the
// little-endian uint16 that stores them in text order.
var hexPairs = func() (t [256]uint16) {
	for i := range t {
		t[i] = uint16(hexDigits[i>>4]) | uint16(hexDigits[i&0x0f])<<8
	}
	return t
}()

// reserve takes n consecutive (millisecond << 16 | sequence) values and
// returns the first. A sequence that overflows borrows the next
// millisecond, so values never repeat and never go back.
func reserve(n uint64) uint64 {
	now := uint64(time.Now().UnixMilli()) << 16
	for {
		old := seq.Load()
		first := old + 1
		if now > old {
			first = now
		}
		if seq.CompareAndSwap(old, first+n-1) {
			return first
		}
	}
}

func fill(u *[16]byte, v uint64) {
	ms := v >> 16
	sq := v & 0xffff
	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	// version 7 + 12 high bits of the sequence
	u[6] = 0x70 | byte(sq>>12)&0x0f
	u[7] = byte(sq >> 4)
	// variant 10 + 4 low bits of the sequence + random
	u[8] = 0x80 | byte(sq&0x0f)<<2 | random[0]&0x03
	u[9] = random[1]
	binary.BigEndian.PutUint32(u[10:14], binary.BigEndian.Uint32(random[2:6]))
	u[14] = random[6]
	u[15] = random[7]
}

// Format renders u in the canonical 8-4-4-4-12 form.
func Format(u [16]byte) string {
	var b [36]byte
	format(b[:], u)
	return string(b[:])
}

func format(b []byte, u [16]byte) {
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j] = hexDigits[c>>4]
		b[j+1] = hexDigits[c&0x0f]
		j += 2
	}
}
