//go:build race

package nats_test

// raceDetector is on: the embedded servers run instrumented too, and a
// 3-node cluster's Raft is several times slower.
const raceDetector = true
