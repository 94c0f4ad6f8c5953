package hugemem

import (
	"runtime"
	"unsafe"
)

// Mapped is memory taken from the operating system outside the Go heap
// (an anonymous private mapping where the system has one), for a large
// structure whose life its owner knows, such as the index of a hash table
// that growth replaces: Free gives the memory back at once, where memory
// of the Go heap would stay resident until the collector and the
// scavenger return it, and would count towards the heap's garbage
// collection target meanwhile. A Mapped that becomes unreachable without
// Free is freed by the runtime (a cleanup), so a forgotten one is not
// leaked; every slice of its memory must therefore be used only while the
// Mapped is reachable.
//
// Its methods are not safe for concurrent use with Free.
type Mapped[T any] struct {
	s     []T
	raw   []byte // the mapping, to unmap; nil on the Go heap
	clean runtime.Cleanup
}

// Map returns n zeroed values of T in fresh memory (the values must hold
// no pointers). The memory is mapped on a 2 MiB boundary and marked for
// huge pages as Lazy marks its slices, so each whole 2 MiB page is
// faulted in as one huge page when first touched; where there is no
// mapping (other systems, or the mapping fails) it is ordinary Go memory.
func Map[T any](n int) *Mapped[T] {
	var zero T
	size := int(unsafe.Sizeof(zero))
	m := &Mapped[T]{}
	if size > 0 && n > 0 {
		if raw := mapAligned(n * size); raw != nil {
			m.raw = raw
			m.s = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(raw))), n)
			m.clean = runtime.AddCleanup(m, unmap, raw)
			return m
		}
	}
	m.s = make([]T, n)
	return m
}

// Slice is the memory: n values. It must not be used after Free, nor
// once m is unreachable.
func (m *Mapped[T]) Slice() []T { return m.s }

// Free gives the memory back to the system now; m and its slices must not
// be used after. Free of a nil Mapped, or a second Free, does nothing.
func (m *Mapped[T]) Free() {
	if m == nil || m.s == nil {
		return
	}
	m.s = nil
	if m.raw != nil {
		m.clean.Stop()
		unmap(m.raw)
		m.raw = nil
	}
}

// OffHeap reports whether m's memory is a mapping outside the Go heap.
func (m *Mapped[T]) OffHeap() bool { return m != nil && m.raw != nil }
