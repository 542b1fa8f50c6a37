// Package msgid generates time-ordered unique message IDs (UUID version 7,
// RFC 9562) quickly and without locks on the hot path.
package msgid

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"time"
)

// state packs the last millisecond (upper 48 bits... kept separately) and a
// per-millisecond sequence so that IDs from one process sort in creation
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
	now := uint64(time.Now().UnixMilli())
	var v uint64
	for {
		old := seq.Load()
		ms := old >> 16
		if now > ms {
			v = now << 16
		} else {
			v = old + 1 // same (or earlier) millisecond: bump the sequence;
			// overflow of the 16-bit sequence borrows the next millisecond
		}
		if seq.CompareAndSwap(old, v) {
			break
		}
	}
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
	return string(b[:])
}
