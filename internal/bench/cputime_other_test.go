//go:build !unix

package bench

import "time"

// processCPU is not measured on this platform; CPU metrics read 0.
func processCPU() time.Duration { return 0 }
