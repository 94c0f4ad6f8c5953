package hugemem

import "unsafe"

// Lazy returns a zeroed slice of n values (length and capacity n) for
// memory that is filled over time, such as the pages and index of a
// growing hash table or a data set read from files: if it is at least
// MinBytes long, it starts on a 2 MiB boundary and is marked for huge
// pages (MADV_HUGEPAGE only), so that each 2 MiB the program first touches
// is faulted in as one huge page, while the part it never touches takes
// no memory. Float32s, by contrast, faults the whole buffer in at once.
// The values must hold no pointers.
func Lazy[T any](n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if size == 0 || n*size < MinBytes {
		return make([]T, n)
	}
	pad := (PageSize + size - 1) / size
	b := make([]T, n+pad)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((PageSize-start%PageSize)%PageSize) / size
	b = b[off : off+n : off+n]
	_ = mark(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), n*size))
	return b
}

// GrowLazy returns s with room for at least k more values, as slices.Grow
// does (the values past len(s) are zero); when it must reallocate, the new
// memory comes from Lazy, and only the values of s are copied into it (a
// slices.Grow of a large slice clears its whole new tail, touching memory
// that may never be used).
func GrowLazy[T any](s []T, k int) []T {
	if cap(s)-len(s) >= k {
		return s
	}
	ns := Lazy[T](max(len(s)+k, cap(s)+cap(s)/4))
	copy(ns, s)
	return ns[:len(s)]
}
