//go:build !race

package nats_test

const raceDetector = false
