package sqs

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/eventbus-go/bus/backend"
)

// maxFIFOID is the longest MessageGroupId and MessageDeduplicationId
// AWS takes.
const maxFIFOID = 128

// fifoIDs returns the MessageGroupId and MessageDeduplicationId of m on a
// FIFO topic. The group is the key, so that a key's messages keep their
// order; a message without a key is a group of its own (its ID), so that
// keyless messages never wait for each other. The deduplication ID is
// the message ID, so that a caller-set ID published again within SQS's
// deduplication window is stored once. A value AWS would refuse (over
// 128 characters, or a character that is not printable ASCII) is
// replaced by the hex SHA-256 of it after a "~", a character no
// replaced value keeps.
func fifoIDs(m *backend.Message) (group, dedup string) {
	dedup = fifoID(m.ID)
	if m.Key == "" {
		return dedup, dedup
	}
	return fifoID(m.Key), dedup
}

func fifoID(s string) string {
	ok := s != "" && len(s) <= maxFIFOID
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] > ' ' && s[i] < 0x7f && s[i] != '~'
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "~" + hex.EncodeToString(sum[:])
}
