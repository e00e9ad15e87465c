//go:build !unix

package client

import "time"

// processCPU is 0 where getrusage is missing: the benchmarks then report
// no CPU time.
func processCPU() time.Duration { return 0 }
