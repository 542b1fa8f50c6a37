//go:build !unix

package inmemory_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
