// Package median folds the rounds of a benchmark that alternates its
// sides (`bus bench --baseline`, contrib/watermill's BenchmarkPeers) into
// one figure each.
//
// # Zeros
//
// A zero is a figure a round did not measure (a latency of a side that
// measured none, a ratio against a side that carried nothing), so Of
// leaves it out rather than let it pull the median down.
package median
