package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWireEncodesAsPgx: every parameter wire encodes has the bytes pgx
// gives it in binary, NULLs, empty arrays, multi-byte text and times
// before 1970 and with nanoseconds among them; a type it does not know,
// or one that does not match the parameter's, leaves the statement to
// pgx.
func TestWireEncodesAsPgx(t *testing.T) {
	at := time.Date(2026, 11, 26, 22, 1, 2, 123456789, time.FixedZone("x", 3600))
	old := time.Date(1969, 7, 20, 20, 17, 40, 999, time.UTC)
	s := "dkey"
	cases := []struct {
		oid uint32
		v   any
	}{
		{pgtype.TextOID, "topic"},
		{pgtype.TextOID, ""},
		{pgtype.Int4OID, int32(-7)},
		{pgtype.Int8OID, int64(1) << 40},
		{pgtype.TextArrayOID, []string{"a", "", "ünïcode ✓"}},
		{pgtype.TextArrayOID, []string{}},
		{pgtype.TextArrayOID, pgtype.FlatArray[string]{"x"}},
		{pgtype.TextArrayOID, []*string{nil, &s}},
		{pgtype.TextArrayOID, []*string{&s}},
		{pgtype.ByteaArrayOID, [][]byte{{0, 1, 2}, {}, nil}},
		{pgtype.ByteaArrayOID, pgtype.FlatArray[[]byte]{{9}}},
		{pgtype.TimestamptzArrayOID, []time.Time{at, old}},
		{pgtype.TimestamptzArrayOID, pgtype.FlatArray[time.Time]{at}},
		{pgtype.TimestamptzArrayOID, []*time.Time{nil, &at}},
		{pgtype.TimestamptzArrayOID, pgtype.FlatArray[*time.Time]{&old}},
	}
	m := pgtype.NewMap()
	var oids []uint32
	var args []any
	for _, c := range cases {
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.v, []byte{})
		require.NoError(t, err, "%T", c.v)
		w := new(wire)
		require.True(t, w.encode([]uint32{c.oid}, []any{c.v}), "%T as %d", c.v, c.oid)
		assert.Equal(t, want, w.vals[0], "%T %v", c.v, c.v)
		oids, args = append(oids, c.oid), append(args, c.v)
	}
	w := new(wire)
	require.True(t, w.encode(oids, args), "all of them as the parameters of one statement")
	for i, c := range cases {
		want, _ := m.Encode(c.oid, pgtype.BinaryFormatCode, c.v, []byte{})
		assert.Equal(t, want, w.vals[i], "parameter %d", i)
	}
	assert.Len(t, w.formats, len(cases))

	assert.False(t, new(wire).encode([]uint32{pgtype.Int8OID}, []any{int32(1)}), "an int4 value for an int8 parameter")
	assert.False(t, new(wire).encode([]uint32{pgtype.TextOID}, []any{3.5}), "a type wire does not encode")
	assert.False(t, new(wire).encode([]uint32{pgtype.TextOID, pgtype.TextOID}, []any{"x"}), "fewer values than parameters")
}

// TestTimeOfMicrosInvertsMicrosSinceY2K: a binary timestamptz that wire
// writes reads back as the same instant to the microsecond, before and
// after 2000 and 1970.
func TestTimeOfMicrosInvertsMicrosSinceY2K(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 11, 26, 22, 1, 2, 123456789, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1969, 7, 20, 20, 17, 40, 1500, time.FixedZone("x", -3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		got := timeOfMicros(microsSinceY2K(at))
		want := at.Truncate(time.Microsecond)
		assert.True(t, got.Equal(want), "%v read back as %v", at, got)
	}
}
