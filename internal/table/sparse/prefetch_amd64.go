//go:build amd64 && !purego

package sparse

import "unsafe"

// prefetch asks for the cache line at p (PREFETCHT0); it never faults.
//
//go:noescape
func prefetch(p unsafe.Pointer)
