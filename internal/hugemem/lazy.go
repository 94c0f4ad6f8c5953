package hugemem

import "unsafe"

// Lazy returns a zeroed slice of n values (length and capacity n) for
// memory that is filled over time, such as the index of a growing hash
// table or a data set read from files: if it is at least MinBytes long, the
// whole 2 MiB pages inside it are marked for huge pages (MADV_HUGEPAGE
// only), so that each of them is faulted in as one huge page when first
// touched. Unlike Float32s it neither pads the slice to start on a 2 MiB
// boundary (the part before the first boundary and after the last stays on
// small pages) nor faults it in at once, so it costs no memory beyond n
// values. The values must hold no pointers.
func Lazy[T any](n int) []T {
	b := make([]T, n)
	var zero T
	size := int(unsafe.Sizeof(zero))
	if size == 0 || n*size < MinBytes {
		return b
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((PageSize - start%PageSize) % PageSize)
	if off < n*size {
		_ = mark(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), off)), n*size-off))
	}
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
