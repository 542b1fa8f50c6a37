package redisstream

import (
	"bytes"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Reads take the raw RESP reply of XREADGROUP (go-redis DoRaw) and parse
// it here: go-redis's typed reply builds a map and a boxed string per
// field of every entry, which costs more than the rest of the receive
// path. The parser accepts RESP2 and RESP3 and never retains the reply:
// fields point into it only until they are decoded.

// rawField is one field of a stream entry, both parts pointing into the
// raw reply.
type rawField struct{ name, value []byte }

// rawEntry is one entry of an XREADGROUP reply. fields indexes the
// reply's field list; deleted is set for an entry that was deleted while
// pending (its fields are nil in the reply).
type rawEntry struct {
	id         []byte
	start, end int // fields[start:end] of the reply
	deleted    bool
}

// replyError is an error reply of the server, carried in a raw reply. It
// satisfies redis.Error like the errors of go-redis's typed commands.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a server error reply.
func (replyError) RedisError() {}

var _ redis.Error = replyError("")

var errBadReply = errors.New("unexpected XREADGROUP reply")

// respParser walks one raw reply.
type respParser struct {
	b   []byte
	pos int
}

// line returns the next line without its CRLF. A line of the replies
// parsed here (a type and a length, or a simple string) never holds a
// CR, so the first CR must start the CRLF.
func (p *respParser) line() ([]byte, error) {
	rest := p.b[p.pos:]
	i := bytes.IndexByte(rest, '\r')
	if i < 1 || i+1 == len(rest) || rest[i+1] != '\n' {
		return nil, errBadReply
	}
	p.pos += i + 2
	return rest[:i], nil
}

// header reads the next element's type and length; null reports a RESP2
// or RESP3 null (length -1 or '_').
func (p *respParser) header() (kind byte, n int, null bool, err error) {
	l, err := p.line()
	if err != nil {
		return 0, 0, false, err
	}
	kind = l[0]
	switch kind {
	case '_':
		return kind, 0, true, nil
	case '+', '-':
		return kind, len(l) - 1, false, nil
	}
	n, ok := parseLength(l[1:])
	if !ok {
		return 0, 0, false, errBadReply
	}
	return kind, n, n == -1, nil
}

// parseLength parses the length of a RESP header: decimal digits, or -1
// for a null. It refuses anything else, a sign or a number with more than
// 18 digits (which could overflow) included.
func parseLength(b []byte) (int, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// str reads a bulk or simple string.
func (p *respParser) str() ([]byte, error) {
	start := p.pos
	kind, n, null, err := p.header()
	if err != nil {
		return nil, err
	}
	switch {
	case kind == '+' && !null:
		return p.b[start+1 : start+1+n], nil
	case kind == '$' && !null:
		if n > len(p.b)-p.pos-2 || p.b[p.pos+n] != '\r' || p.b[p.pos+n+1] != '\n' {
			return nil, errBadReply
		}
		s := p.b[p.pos : p.pos+n : p.pos+n]
		p.pos += n + 2
		return s, nil
	}
	return nil, errBadReply
}

// aggregate reads an array or map header and returns how many elements
// (map: pairs times two) follow; null for a null reply.
func (p *respParser) aggregate() (n int, null bool, err error) {
	kind, n, null, err := p.header()
	if err != nil || null {
		return 0, null, err
	}
	switch kind {
	case '*', '~':
		return n, false, nil
	case '%':
		return 2 * n, false, nil
	}
	return 0, false, errBadReply
}

// replyErr returns the error a raw reply carries: a server error reply
// as a replyError, redis.Nil for a null reply (BLOCK ran out), nil
// otherwise.
func replyErr(raw []byte) error {
	if len(raw) == 0 {
		return errBadReply
	}
	switch raw[0] {
	case '-':
		return replyError(bytes.TrimRight(raw[1:], "\r\n"))
	case '!':
		p := respParser{b: raw}
		// A null blob error ("!-1") is not a valid reply.
		if _, n, null, err := p.header(); err == nil && !null && n <= len(raw)-p.pos {
			return replyError(raw[p.pos : p.pos+n])
		}
		return errBadReply
	case '_':
		return redis.Nil
	case '*', '%':
		if bytes.HasPrefix(raw[1:], []byte("-1\r\n")) {
			return redis.Nil
		}
	}
	return nil
}

// parseXRead parses the raw reply of an XREADGROUP on one stream (RESP2:
// an array of [stream, entries] pairs; RESP3: a map of stream to
// entries). It appends the entries to entries and their fields to
// fields, and returns both.
func parseXRead(raw []byte, entries []rawEntry, fields []rawField) ([]rawEntry, []rawField, error) {
	if err := replyErr(raw); err != nil {
		return entries, fields, err
	}
	p := respParser{b: raw}
	kind := raw[0]
	streams, _, err := p.aggregate()
	if err != nil {
		return entries, fields, err
	}
	if kind == '%' {
		streams /= 2
	}
	for range streams {
		if kind == '*' {
			if n, _, err := p.aggregate(); err != nil || n != 2 {
				return entries, fields, errBadReply
			}
		}
		if _, err := p.str(); err != nil {
			return entries, fields, err
		}
		n, null, err := p.aggregate()
		if err != nil {
			return entries, fields, err
		}
		if null {
			continue
		}
		for range n {
			if entries, fields, err = p.entry(entries, fields); err != nil {
				return entries, fields, err
			}
		}
	}
	if p.pos != len(raw) {
		return entries, fields, errBadReply
	}
	return entries, fields, nil
}

// entry parses one [id, [field, value, ...]] element.
func (p *respParser) entry(entries []rawEntry, fields []rawField) ([]rawEntry, []rawField, error) {
	n, null, err := p.aggregate()
	if err != nil || null || n != 2 {
		return entries, fields, errBadReply
	}
	id, err := p.str()
	if err != nil {
		return entries, fields, err
	}
	e := rawEntry{id: id, start: len(fields)}
	nf, null, err := p.aggregate()
	if err != nil {
		return entries, fields, err
	}
	if null {
		e.deleted = true
	} else if nf%2 != 0 {
		return entries, fields, errBadReply
	}
	for range nf / 2 {
		var f rawField
		if f.name, err = p.str(); err != nil {
			return entries, fields, err
		}
		if f.value, err = p.str(); err != nil {
			return entries, fields, err
		}
		fields = append(fields, f)
	}
	e.end = len(fields)
	return append(entries, e), fields, nil
}

// fieldMap turns raw fields into the field map decode and the dead-letter
// copy of a malformed entry take (later duplicates win, as in go-redis's
// typed replies).
func fieldMap(fs []rawField) map[string]any {
	m := make(map[string]any, len(fs))
	for _, f := range fs {
		m[string(f.name)] = string(f.value)
	}
	return m
}
