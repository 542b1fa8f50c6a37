package nats

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxNameLen caps derived stream and consumer names. JetStream stores
// them as directory names, so they stay well under file-system limits.
const maxNameLen = 128

// escapeName turns a topic or group (letters, digits and ". _ - :", and
// "~" in a partition topic, backend.PartitionTopic) into a JetStream name
// (letters, digits, - and _) injectively:
//
//	"." -> "-"    "-" -> "_h"    "_" -> "__"    ":" -> "_c"    "~" -> "_p"
//
// so "orders.created" becomes "orders-created" and no two topics share a
// name. Every "_" starts a two-character escape, which is what makes the
// mapping reversible.
func escapeName(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '.':
			b.WriteByte('-')
		case '-':
			b.WriteString("_h")
		case '_':
			b.WriteString("__")
		case ':':
			b.WriteString("_c")
		case '~':
			b.WriteString("_p")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeName reverses escapeName; ok is false for a name escapeName
// cannot have made.
func unescapeName(name string) (s string, ok bool) {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '-':
			b.WriteByte('.')
		case c != '_':
			b.WriteByte(c)
		case i+1 == len(name):
			return "", false
		default:
			i++
			r, known := unescapes[name[i]]
			if !known {
				return "", false
			}
			b.WriteByte(r)
		}
	}
	return b.String(), true
}

// unescapes maps the second character of an escape to what it stands for.
var unescapes = map[byte]byte{'h': '-', '_': '_', 'c': ':', 'p': '~'}

// groupOf returns the group whose consumer of topic is named consumer,
// for consumers without the group in their metadata (servers before 2.10
// keep none): ok is false when consumer is not a name consumerFor gives
// (another application's consumer, or a name cut by boundName).
func (b *Backend) groupOf(topic, consumer string) (string, bool) {
	name := consumer
	if b.opts.StreamMode == StreamShared {
		var cut bool
		if name, cut = strings.CutSuffix(consumer, "_t"+escapeName(topic)); !cut {
			return "", false
		}
	}
	g, ok := unescapeName(name)
	if !ok || b.consumerFor(topic, g) != consumer {
		return "", false
	}
	return g, true
}

// boundName keeps name within maxNameLen: a longer name is cut and ended
// with "_x" and a hash of the whole name, which keeps it unique.
func boundName(name string) string {
	if len(name) <= maxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:10])
	return name[:maxNameLen-len(h)-2] + "_x" + h
}

// topicNames are the names derived from one topic. Publish needs them on
// every call, so they are cached (see namesFor).
type topicNames struct {
	subject string // subjectFor
	stream  string // streamFor
	idScope string // idScope
}

// namesFor returns the derived names of topic, derived once per topic
// (see internal/topiccache).
func (b *Backend) namesFor(topic string) *topicNames {
	if n, ok := b.topics.Load(topic); ok {
		return n
	}
	return b.topics.Store(topic, &topicNames{subject: b.subjectFor(topic), stream: b.streamFor(topic), idScope: b.idScope(topic)})
}

// subjectFor returns the NATS subject of topic. Bus topics are valid
// subjects already (dot-separated tokens without wildcards).
func (b *Backend) subjectFor(topic string) string {
	return b.opts.SubjectPrefix + "." + topic
}

// streamFor returns the stream that stores topic.
func (b *Backend) streamFor(topic string) string {
	if b.opts.StreamMode == StreamShared {
		return b.opts.StreamName
	}
	return boundName(b.opts.StreamPrefix + "_" + escapeName(topic))
}

// streamSubjects returns the subjects of the stream that stores topic.
func (b *Backend) streamSubjects(topic string) []string {
	if b.opts.StreamMode == StreamShared {
		return []string{b.opts.SubjectPrefix + ".>"}
	}
	if b.caps.Scheduling {
		return []string{b.subjectFor(topic), b.schedPattern(topic)}
	}
	return []string{b.subjectFor(topic)}
}

// consumerFor returns the durable consumer name of group on topic. In a
// per-topic stream the group name is enough; a shared stream holds every
// topic, so the name carries both ("_t" cannot come out of escapeName at
// an escape boundary, which keeps pairs apart).
func (b *Backend) consumerFor(topic, group string) string {
	if b.opts.StreamMode == StreamShared {
		return boundName(escapeName(group) + "_t" + escapeName(topic))
	}
	return boundName(escapeName(group))
}

// idScope is what goes before a message ID in Nats-Msg-Id: nothing when
// the topic has a stream of its own, "<topic>|" in a shared stream, where
// the server's deduplication would otherwise span topics (a dead-letter
// copy keeps its original's ID). Topics cannot contain "|".
func (b *Backend) idScope(topic string) string {
	if b.opts.StreamMode == StreamShared {
		return topic + "|"
	}
	return ""
}
