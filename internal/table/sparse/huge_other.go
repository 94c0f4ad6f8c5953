//go:build !linux

package sparse

import "unsafe"

// adviseHuge does nothing where huge pages are not asked for.
func adviseHuge(unsafe.Pointer, uintptr) {}
