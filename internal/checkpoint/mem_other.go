//go:build !linux

package checkpoint

// physicalMemory is this machine's memory in bytes, 0 if unknown.
func physicalMemory() int64 { return 0 }
