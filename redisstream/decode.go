package redisstream

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/recvbuf"
)

// decodeBuf is the scratch space of raw reads, reused by Receive (one
// goroutine).
type decodeBuf struct {
	entries []rawEntry
	fields  []rawField
	ids     []byte
	recv    recvbuf.Buffer // messages of the last Receive, reused by the next
}

// decodeEntries turns the entries of a typed read into messages (first
// deliveries); malformed ones are quarantined and deleted ones acked.
func (s *subscription) decodeEntries(ctx context.Context, entries []redis.XMessage) []*backend.Message {
	s.linger.took(len(entries))
	if len(entries) > 0 {
		s.noteHanded(entries[len(entries)-1].ID)
	}
	vals, msgs := s.dec.recv.Next(len(entries))
	refs := make([]entryRef, len(entries))
	var trimmed []string
	for i := range entries {
		e := &entries[i]
		m := &vals[i]
		if e.Values == nil {
			// Deleted between delivery and read: nothing to hand out.
			trimmed = append(trimmed, e.ID)
			continue
		}
		if err := decode(e.ID, e.Values, m); err != nil {
			s.quarantine(ctx, e.ID, e.Values, 1, err)
			continue
		}
		refs[i] = entryRef{id: e.ID, count: 1}
		m.AckID = &refs[i]
		m.Attempt = 1
		msgs = append(msgs, m)
	}
	s.dropTrimmed(ctx, trimmed)
	return msgs
}

// decodeRaw turns the raw reply of a read that found entries into
// messages. Entries the bus wrote take the fast path (decodeFields);
// anything else is decoded from its field map, which gives the canonical
// error of a malformed entry.
func (s *subscription) decodeRaw(ctx context.Context, raw []byte) ([]*backend.Message, error) {
	entries, fields, err := parseXRead(raw, s.dec.entries[:0], s.dec.fields[:0])
	defer func() {
		// Keep the scratch space, but no reference into the reply.
		clear(entries)
		clear(fields)
		s.dec.entries, s.dec.fields = entries[:0], fields[:0]
	}()
	if err != nil {
		// Entries the read took stay pending: the next Receive takes
		// them back first.
		s.setRecovering(true)
		return nil, s.errf("receive", err)
	}
	s.linger.took(len(entries))
	vals, msgs := s.dec.recv.Next(len(entries))
	refs := make([]entryRef, len(entries))
	payloads := newPayloadSlab(entries, fields)
	var trimmed []string
	last := ""
	defer func() { s.noteHanded(last) }()
	for i, e := range entries {
		if e.deleted {
			trimmed = append(trimmed, string(e.id))
			last = trimmed[len(trimmed)-1]
			continue
		}
		m := &vals[i]
		fs := fields[e.start:e.end]
		var id string
		if msgID, ok := decodeFields(fs, m, payloads); ok {
			// One string holds the entry ID and the message ID.
			s.dec.ids = append(append(s.dec.ids[:0], e.id...), msgID...)
			both := string(s.dec.ids)
			id, m.ID = both[:len(e.id)], both[len(e.id):]
			last = id
		} else {
			id = string(e.id)
			last = id
			values := fieldMap(fs)
			if err := decode(id, values, m); err != nil {
				s.quarantine(ctx, id, values, 1, err)
				continue
			}
		}
		refs[i] = entryRef{id: id, count: 1}
		m.AckID = &refs[i]
		m.Attempt = 1
		msgs = append(msgs, m)
	}
	s.dropTrimmed(ctx, trimmed)
	return msgs, nil
}
