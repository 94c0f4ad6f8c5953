//go:build !linux

package hugemem

// threadCPU reports no per-thread clock where there is none to read.
func threadCPU() (int64, bool) { return 0, false }
