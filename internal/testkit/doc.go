// Package testkit holds the harnesses of the project's tests, apart from
// the production internals: private servers started on loopback
// (redistest, natstest, pgtest, rabbittest, kafkatest, on serverproc), the fault proxy and its
// suite (faultproxy, faultproxy/faultsuite), the crash helper the
// conformance suite uses (crashtest), the broadcast test across killed
// processes (broadcasttest), the autoscaling load (autoscaletest) and
// the load of the Go benchmarks (benchload). Nothing a program links imports them, but for the
// conformance suite, which is itself a test harness.
package testkit
