// Package hugemem allocates the large float32 buffers that a ps copies
// through sockets and sweeps with update rules (variable values, optimizer
// state, receive buffers) so that the kernel can back them with 2 MiB pages
// instead of 4 KiB ones.
//
// A 16 MiB buffer spans 4096 small pages, more than the second-level TLB of
// common x86 cores holds; every copy into or out of a socket and every
// update then walks page tables. With 2 MiB pages the same buffer needs 8
// TLB entries. ps-lite's authors measured the same effect (a 64 MB
// push+pull went from 121 ms to 73 ms with huge pages).
//
// The memory is ordinary Go heap memory, garbage collected like any slice:
// Float32s over-allocates by one huge page, returns the part that starts on
// a 2 MiB boundary, and asks the kernel (madvise) to use huge pages for it.
// The advice is a hint: where transparent huge pages are off, or on other
// systems, the buffer is an ordinary one and everything works the same.
//
// Map is the exception: memory mapped outside the Go heap, for a large
// structure its owner replaces and frees itself (a hash table's index), so
// that the replaced memory leaves the process at once rather than when the
// collector and the scavenger get to it.
package hugemem

import "unsafe"

// PageSize is the size of the pages asked for: x86-64's and arm64's usual
// transparent huge page.
const PageSize = 2 << 20

// MinBytes is the smallest buffer Float32s places on huge pages; a smaller
// one is a plain make, since one huge page of padding would cost more than
// the TLB entries it saves.
const MinBytes = 4 << 20

// Float32s returns a zeroed slice of n float32 values (length and capacity
// n). If it is at least MinBytes long, it starts on a 2 MiB boundary and
// its whole huge pages are advised to the kernel as such.
func Float32s(n int) []float32 {
	if 4*n < MinBytes {
		return make([]float32, n)
	}
	b := aligned(n)
	_ = advise(bytesOf(b))
	return b
}

// aligned returns n zeroed float32 values (length and capacity n) that
// start on a 2 MiB boundary, cut from a slice one huge page longer; no
// advice is given.
func aligned(n int) []float32 {
	const pad = PageSize / 4
	b := make([]float32, n+pad)
	off := int((PageSize-uintptr(unsafe.Pointer(unsafe.SliceData(b)))%PageSize)%PageSize) / 4
	return b[off : off+n : off+n]
}

// Grow returns buf with room for at least k more values, as slices.Grow
// does; when it must reallocate, the new buffer comes from Float32s, at
// least twice as large as the old one.
func Grow(buf []float32, k int) []float32 {
	if cap(buf)-len(buf) >= k {
		return buf
	}
	nb := Float32s(max(2*cap(buf), len(buf)+k))
	copy(nb, buf)
	return nb[:len(buf)]
}

// bytesOf is b's memory as bytes.
func bytesOf(b []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b))
}
