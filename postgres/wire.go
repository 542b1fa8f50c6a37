package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// insertResult is what an insert statement returns (see insertSQL): the
// count of messages written, the notifications sent and whether one was
// due.
type insertResult struct {
	n, notified int64
	wanted      bool
}

// runInsert runs an insert statement (see insertSQL) with args on a
// connection of the pool. On a connection in pgx's default mode (cached
// prepared statements) without a tracer, and when every parameter is of
// a type wire knows, it encodes the parameters itself, in PostgreSQL's
// binary format, into a buffer it reuses, and runs the prepared
// statement on the connection's pgconn: a batch is copied once, rather
// than into a fresh buffer grown by pgx for each call. Otherwise it runs
// the statement through pgx.
//
// A plain statement (an INSERT that returns no row, see leanPlainSQL)
// has its count of messages written from its command tag.
func (b *Backend) runInsert(ctx context.Context, sql string, plain bool, args []any) (insertResult, error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return insertResult{}, err
	}
	defer conn.Release()
	viaPgx := func() (insertResult, error) {
		if plain {
			tag, err := conn.Exec(ctx, sql, args...)
			return insertResult{n: tag.RowsAffected()}, err
		}
		return scanInsert(conn.QueryRow(ctx, sql, args...))
	}
	cfg := conn.Conn().Config()
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cfg.Tracer != nil {
		return viaPgx()
	}
	sd, err := conn.Conn().Prepare(ctx, sql, sql)
	if err != nil {
		return insertResult{}, err
	}
	w := wires.Get().(*wire)
	defer w.release()
	if !w.encode(sd.ParamOIDs, args) {
		return viaPgx()
	}
	if plain {
		if len(sd.Fields) != 0 {
			return viaPgx()
		}
		tag, err := conn.Conn().PgConn().ExecStatement(ctx, sd, w.vals, w.formats, nil).Close()
		return insertResult{n: tag.RowsAffected()}, err
	}
	if len(sd.Fields) != 3 || sd.Fields[0].DataTypeOID != pgtype.Int8OID || sd.Fields[1].DataTypeOID != pgtype.Int8OID || sd.Fields[2].DataTypeOID != pgtype.BoolOID {
		return viaPgx()
	}
	rr := conn.Conn().PgConn().ExecStatement(ctx, sd, w.vals, w.formats, insertResultFormats)
	var res insertResult
	rows := 0
	for rr.NextRow() {
		v := rr.Values()
		if rows++; rows == 1 && len(v) == 3 && len(v[0]) == 8 && len(v[1]) == 8 && len(v[2]) == 1 {
			res = insertResult{n: int64(binary.BigEndian.Uint64(v[0])), notified: int64(binary.BigEndian.Uint64(v[1])), wanted: v[2][0] != 0}
		}
	}
	if _, err := rr.Close(); err != nil {
		return insertResult{}, err
	}
	if rows != 1 {
		return insertResult{}, errInsertResult
	}
	return res, nil
}

var errInsertResult = errors.New("the insert returned no row of three values")

// insertResultFormats asks for the insert's three columns in binary.
var insertResultFormats = []int16{pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode}

func scanInsert(row pgx.Row) (insertResult, error) {
	var r insertResult
	err := row.Scan(&r.n, &r.notified, &r.wanted)
	return r, err
}

// wire holds the binary encoding of one statement's parameters: buf the
// bytes, vals each parameter's slice of them (nil for NULL).
type wire struct {
	buf     []byte
	ends    []int // where each parameter's bytes end in buf; -1: NULL
	vals    [][]byte
	formats []int16
}

var wires = sync.Pool{New: func() any { return new(wire) }}

// wireKeep is the largest buffer a wire keeps for the next statement.
const wireKeep = 1 << 20

func (w *wire) release() {
	if cap(w.buf) > wireKeep {
		w.buf = nil
	}
	clear(w.vals) // drop the references into buf
	wires.Put(w)
}

// encode encodes args as parameters of the types oids, and reports
// whether it knew how: a Go type wire does not encode, or one that does
// not match its parameter's type, leaves the statement to pgx.
func (w *wire) encode(oids []uint32, args []any) bool {
	if len(oids) != len(args) {
		return false
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, 4096) // an empty parameter is not NULL
	}
	w.buf, w.ends, w.vals, w.formats = w.buf[:0], w.ends[:0], w.vals[:0], w.formats[:0]
	for i, a := range args {
		if !w.param(oids[i], a) {
			return false
		}
	}
	start := 0
	for _, end := range w.ends {
		if end < 0 {
			w.vals = append(w.vals, nil)
			continue
		}
		w.vals = append(w.vals, w.buf[start:end:end])
		start = end
	}
	return true
}

// param appends one parameter.
func (w *wire) param(oid uint32, a any) bool {
	switch v := a.(type) {
	case string:
		if oid != pgtype.TextOID {
			return false
		}
		w.buf = append(w.buf, v...)
	case int32:
		if oid != pgtype.Int4OID {
			return false
		}
		w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(v))
	case int64:
		if oid != pgtype.Int8OID {
			return false
		}
		w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v))
	case []string:
		return w.array(oid, pgtype.TextArrayOID, pgtype.TextOID, len(v), func(i int) bool {
			w.elem(len(v[i]))
			w.buf = append(w.buf, v[i]...)
			return true
		}, false)
	case pgtype.FlatArray[string]:
		return w.param(oid, []string(v))
	case []*string:
		return w.array(oid, pgtype.TextArrayOID, pgtype.TextOID, len(v), func(i int) bool {
			if v[i] == nil {
				w.elem(-1)
				return false
			}
			w.elem(len(*v[i]))
			w.buf = append(w.buf, *v[i]...)
			return true
		}, true)
	case [][]byte:
		return w.array(oid, pgtype.ByteaArrayOID, pgtype.ByteaOID, len(v), func(i int) bool {
			if v[i] == nil {
				w.elem(-1)
				return false
			}
			w.elem(len(v[i]))
			w.buf = append(w.buf, v[i]...)
			return true
		}, true)
	case pgtype.FlatArray[[]byte]:
		return w.param(oid, [][]byte(v))
	case []time.Time:
		return w.array(oid, pgtype.TimestamptzArrayOID, pgtype.TimestamptzOID, len(v), func(i int) bool {
			w.elem(8)
			w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(microsSinceY2K(v[i])))
			return true
		}, false)
	case pgtype.FlatArray[time.Time]:
		return w.param(oid, []time.Time(v))
	case []*time.Time:
		return w.array(oid, pgtype.TimestamptzArrayOID, pgtype.TimestamptzOID, len(v), func(i int) bool {
			if v[i] == nil {
				w.elem(-1)
				return false
			}
			w.elem(8)
			w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(microsSinceY2K(*v[i])))
			return true
		}, true)
	case pgtype.FlatArray[*time.Time]:
		return w.param(oid, []*time.Time(v))
	default:
		return false
	}
	w.ends = append(w.ends, len(w.buf))
	w.formats = append(w.formats, pgtype.BinaryFormatCode)
	return true
}

// array appends a one-dimensional array of n elements of type elem (the
// array's type arrayOID must be oid); each(i) appends element i and
// reports whether it is not NULL. nullable says whether any may be.
func (w *wire) array(oid, arrayOID, elem uint32, n int, each func(i int) bool, nullable bool) bool {
	if oid != arrayOID {
		return false
	}
	start := len(w.buf)
	w.buf = binary.BigEndian.AppendUint32(w.buf, 1) // dimensions
	w.buf = binary.BigEndian.AppendUint32(w.buf, 0) // has nulls: set below
	w.buf = binary.BigEndian.AppendUint32(w.buf, elem)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(n))
	w.buf = binary.BigEndian.AppendUint32(w.buf, 1) // lower bound
	nulls := false
	for i := range n {
		if !each(i) {
			nulls = true
		}
	}
	if nulls && nullable {
		binary.BigEndian.PutUint32(w.buf[start+4:], 1)
	}
	w.ends = append(w.ends, len(w.buf))
	w.formats = append(w.formats, pgtype.BinaryFormatCode)
	return true
}

// elem appends an element's length (-1: NULL).
func (w *wire) elem(n int) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(int32(n)))
}

// y2kUnix is PostgreSQL's epoch for timestamps, 2000-01-01 UTC, in Unix
// seconds.
const y2kUnix = 946684800

// microsSinceY2K is t as a timestamptz in binary: microseconds since
// 2000-01-01 UTC, the nanoseconds below a microsecond dropped, as pgx
// encodes it.
func microsSinceY2K(t time.Time) int64 {
	return (t.Unix()-y2kUnix)*1_000_000 + int64(t.Nanosecond())/1000
}

// timeOfMicros is the time of a binary timestamptz: the inverse of
// microsSinceY2K.
func timeOfMicros(us int64) time.Time {
	return time.Unix(y2kUnix+us/1_000_000, us%1_000_000*1_000)
}
