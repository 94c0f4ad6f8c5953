//go:build !unix

package optim

// cpuNanos is -1 where the benchmarks do not read CPU time.
func cpuNanos() int64 { return -1 }
