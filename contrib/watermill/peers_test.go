package watermill

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeersCountEveryMessageOnceOnEverySide runs a short round of
// BenchmarkPeers on the backends whose private servers start in a
// moment, so that its three sides run with every test run.
func TestPeersCountEveryMessageOnceOnEverySide(t *testing.T) {
	for _, be := range peerBackends {
		if be.name != "mem" && be.name != "redis" && be.name != "nats" && be.name != "postgres" {
			continue
		}
		t.Run(be.name, func(t *testing.T) {
			sides := be.open(t, be.start(t))
			r, err := runRound(sides, 1, 1000)
			require.NoError(t, err, "a round of 1,000 messages a side completes")
			for j, name := range peerSideNames {
				assert.Zero(t, r[j].lost, "%s: every message arrives", name)
				assert.Zero(t, r[j].dups, "%s: no message arrives twice", name)
				assert.Positive(t, r[j].msgsPerSec, "%s: the pass has a rate", name)
				assert.Positive(t, r[j].p99, "%s: the pass has latencies", name)
			}
		})
	}
}

// TestTallyCountsLossesAndRepeats: the counts BenchmarkPeers fails a run
// on. A message that never arrives is lost; one that arrives twice, and a
// payload of no message of the pass, are counted as duplicates.
func TestTallyCountsLossesAndRepeats(t *testing.T) {
	tl := newTally(4)
	msg := func(seq uint64) []byte {
		p := make([]byte, 16)
		binary.LittleEndian.PutUint64(p, seq)
		return p
	}
	tl.handle(msg(0))
	tl.handle(msg(1))
	tl.handle(msg(1))          // a repeat
	tl.handle(msg(9))          // no message of the pass
	tl.handle([]byte("short")) // not a payload of the benchmark
	r := tl.result()
	assert.Equal(t, int64(2), r.lost, "messages 2 and 3 never arrived")
	assert.Equal(t, int64(3), r.dups, "one repeat and two foreign payloads")

	for seq := range uint64(4) {
		tl = newTally(4)
		for i := range uint64(4) {
			if i != seq {
				tl.handle(msg(i))
			}
		}
		assert.Equal(t, int64(1), tl.result().lost, "message %d missing", seq)
	}
}
