package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// AWS name limits: an SNS topic name has up to 256 and an SQS queue name
// up to 80 characters, both of ASCII letters, digits, hyphens and
// underscores (a FIFO one ends in ".fifo", counted).
const (
	maxTopicName = 256
	maxQueueName = 80
	fifoSuffix   = ".fifo"
)

// topicName returns the SNS topic name of a bus topic, with prefix.
func topicName(prefix, topic string, fifo bool) string {
	return awsName(prefix+topic, maxTopicName, fifo)
}

// queueName returns the SQS queue name of a group on a bus topic, with
// prefix.
func queueName(prefix, topic, group string, fifo bool) string {
	return awsName(prefix+topic+"--"+group, maxQueueName, fifo)
}

// awsName maps s to a name AWS accepts, at most limit characters with the
// ".fifo" suffix when fifo is set. A name that had to change (a character
// AWS refuses, or too long) ends in a hash of s, so that two bus names
// never share an AWS name.
func awsName(s string, limit int, fifo bool) string {
	if fifo {
		limit -= len(fifoSuffix)
	}
	var b strings.Builder
	changed := false
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if changed || len(name) > limit {
		sum := sha256.Sum256([]byte(s))
		h := "-" + hex.EncodeToString(sum[:6])
		name = name[:min(len(name), limit-len(h))] + h
	}
	if fifo {
		name += fifoSuffix
	}
	return name
}
