package postgres

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// fetchOIDs are the types of the columns read reads (those of fetchSQL
// and recoverSQL): seq, n, attempt, tag, id, key, headers, payload,
// published_at.
var fetchOIDs = [...]uint32{
	pgtype.Int8OID, pgtype.Int4OID, pgtype.Int4OID, pgtype.Int8OID,
	pgtype.TextOID, pgtype.ByteaOID, pgtype.ByteaOID, pgtype.ByteaOID,
	pgtype.TimestamptzOID,
}

// fetchRow is one row of a fetch. id, key, headers and payload may
// point into the connection's read buffer: they are valid until the
// next row is read.
type fetchRow struct {
	a                         ackID
	attempt                   int32
	gone                      bool // the message's id is NULL
	id, key, headers, payload []byte
	at                        time.Time
	hasAt                     bool
}

// rawDecoder decodes the rows of one fetch from their wire values when
// every column comes in the binary format of its expected type (text
// columns in either format) and the connection scans these types with
// pgx's own codecs; otherwise (a pool in the simple protocol gets text,
// for one) every row is scanned.
type rawDecoder struct {
	ok  bool
	loc *time.Location // the timestamptz codec's ScanLocation
}

// newRawDecoder returns the decoder of the rows of rows, before the
// first is read.
func newRawDecoder(rows pgx.Rows) rawDecoder {
	fds := rows.FieldDescriptions()
	if len(fds) != len(fetchOIDs) {
		return rawDecoder{}
	}
	for i, fd := range fds {
		// A text value is its bytes in either format; pgx asks for the
		// text format of text.
		if fd.DataTypeOID != fetchOIDs[i] || fd.Format != pgtype.BinaryFormatCode && fd.DataTypeOID != pgtype.TextOID {
			return rawDecoder{}
		}
	}
	conn := rows.Conn()
	if conn == nil {
		return rawDecoder{}
	}
	tm := conn.TypeMap()
	codec := func(oid uint32) pgtype.Codec {
		if t, ok := tm.TypeForOID(oid); ok {
			return t.Codec
		}
		return nil
	}
	if _, ok := codec(pgtype.Int8OID).(pgtype.Int8Codec); !ok {
		return rawDecoder{}
	}
	if _, ok := codec(pgtype.Int4OID).(pgtype.Int4Codec); !ok {
		return rawDecoder{}
	}
	if _, ok := codec(pgtype.TextOID).(pgtype.TextCodec); !ok {
		return rawDecoder{}
	}
	if _, ok := codec(pgtype.ByteaOID).(pgtype.ByteaCodec); !ok {
		return rawDecoder{}
	}
	tz, ok := codec(pgtype.TimestamptzOID).(*pgtype.TimestamptzCodec)
	if !ok {
		return rawDecoder{}
	}
	return rawDecoder{ok: true, loc: tz.ScanLocation}
}

// next decodes the current row of rows into r.
func (d rawDecoder) next(rows pgx.Rows, r *fetchRow) error {
	if d.ok && d.decode(rows.RawValues(), r) {
		return nil
	}
	return scanFetchRow(rows, r)
}

// Bounds of the published_at values decode converts itself (years 1 to
// 9999), in microseconds since 2000-01-01 UTC; scanFetchRow takes the
// others, to fail as pgx does on those it cannot represent.
const (
	minDecodedMicros = -63082281600 * 1_000_000
	maxDecodedMicros = 252455615999 * 1_000_000
)

// decode decodes one row's wire values into r; it reports false, having
// decoded nothing for good, when a value is not one it decodes (scanning
// the row then reports the error, if any).
func (d rawDecoder) decode(vals [][]byte, r *fetchRow) bool {
	if len(vals) != len(fetchOIDs) ||
		len(vals[0]) != 8 || len(vals[1]) != 4 || len(vals[2]) != 4 || len(vals[3]) != 8 {
		return false
	}
	r.a = ackID{
		seq: int64(binary.BigEndian.Uint64(vals[0])),
		n:   int32(binary.BigEndian.Uint32(vals[1])),
		tag: int64(binary.BigEndian.Uint64(vals[3])),
	}
	r.attempt = int32(binary.BigEndian.Uint32(vals[2]))
	r.gone = vals[4] == nil
	r.id, r.key, r.headers, r.payload = vals[4], vals[5], vals[6], vals[7]
	r.at, r.hasAt = time.Time{}, false
	if at := vals[8]; at != nil {
		if len(at) != 8 {
			return false
		}
		us := int64(binary.BigEndian.Uint64(at))
		if us < minDecodedMicros || us > maxDecodedMicros {
			return false
		}
		r.at = timeOfMicros(us)
		if d.loc != nil {
			r.at = r.at.In(d.loc)
		}
		r.hasAt = true
	}
	return true
}

// scanFetchRow scans the current row of rows into r.
func scanFetchRow(rows pgx.Rows, r *fetchRow) error {
	var (
		id *string
		at *time.Time
	)
	if err := rows.Scan(&r.a.seq, &r.a.n, &r.attempt, &r.a.tag, &id, &r.key, &r.headers, &r.payload, &at); err != nil {
		return err
	}
	r.gone = id == nil
	r.id = nil
	if id != nil {
		r.id = []byte(*id)
	}
	r.at, r.hasAt = time.Time{}, at != nil
	if at != nil {
		r.at = *at
	}
	return nil
}

// copyBytes returns a copy of b of its own (nil for nil, empty for
// empty): b is the connection's buffer, and a handler may keep a
// payload as long as it likes.
func copyBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
