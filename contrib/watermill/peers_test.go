package watermill

import (
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
