//go:build !amd64 || purego

package sparse

import "unsafe"

// prefetch does nothing where the package has no assembly for it.
func prefetch(unsafe.Pointer) {}
