//go:build !linux

package hugemem

// mapAligned returns nil where no mapping is used: Map falls back to the
// Go heap.
func mapAligned(n int) []byte { return nil }

// unmap is never called without a mapping.
func unmap(b []byte) {}
