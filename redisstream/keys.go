package redisstream

import "strings"

// keys are the Redis keys of one topic. Every key of a topic carries the
// same hash tag, so they live in one cluster slot and Lua scripts may touch
// them together.
type keys struct {
	stream string // the entries
	hold   string // ZSET of nacks whose delay outlasts the ack timeout
	// held is a HASH of the holds by entry: field "<group>\0<entry id>",
	// value "<ack timeout ms>\0<delivery count>\0<owner>", so the field,
	// "\0" and the value up to its second "\0" are the hold's member.
	held  string
	lease string // HASH of each group's lease: its longest member's ack timeout in ms
	sched string // stream of the messages held until their DeliverAt
	due   string // ZSET of sched's entries by due time
	// ids are the HASHes of the caller-set IDs published within the
	// dedup window: one per time bucket of the window's length, even
	// buckets in ids[0] and odd ones in ids[1].
	ids [2]string
	// locks is a ZSET of the groups that took a group lock on the topic
	// (score 0): their lock and last-holder keys, named from it, are
	// the topic's too.
	locks string
}

// hashTag returns the part of topic that goes between braces: the topic
// without its trailing ".dlq" suffixes, so a topic and its default
// dead-letter topic share a slot and dead-lettering stays atomic on a
// cluster.
func hashTag(topic string) string {
	t := topic
	for strings.HasSuffix(t, deadLetterSuffix) && len(t) > len(deadLetterSuffix) {
		t = t[:len(t)-len(deadLetterSuffix)]
	}
	return t
}

const deadLetterSuffix = ".dlq"

// streamKey returns the stream key of topic: prefix + ":{" + tag + "}" +
// the stripped suffix. Topics cannot contain braces or '#', so distinct
// topics map to distinct keys and no stream key collides with the '#'
// helper keys.
func streamKey(prefix, topic string) string {
	tag := hashTag(topic)
	return prefix + ":{" + tag + "}" + topic[len(tag):]
}

func newKeys(prefix, topic string) keys {
	s := streamKey(prefix, topic)
	return keys{stream: s, hold: s + "#hold", held: s + "#held", lease: s + "#lease", sched: s + "#sched", due: s + "#due", ids: [2]string{s + "#ids:0", s + "#ids:1"}, locks: s + "#locks"}
}

// slotOf returns the Redis Cluster slot of key (CRC16 of its hash tag).
func slotOf(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses for slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
