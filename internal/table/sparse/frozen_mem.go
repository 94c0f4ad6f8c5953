package sparse

import (
	"unsafe"

	"github.com/paramserv/paramserv/internal/parallel"
)

// FrozenMem is memory for a Frozen copy, allocated and written once (so
// the kernel has mapped every page of it) before the server takes its lock:
// the copy under the lock is then a memory copy only. Without it, a copy of
// a table of gigabytes into memory the process has not touched yet costs a
// page fault per 4 KiB under the lock, which triples the pause of pushes
// (BenchmarkCheckpointFTRL: 10M keys of dim 8, about 255k faults).
//
// The steps: under the lock, FrozenSize (it reads only the page sizes);
// after releasing it, Alloc; under the lock again, FrozenIn. Pages that
// grew in between are allocated by FrozenIn as Frozen would.
type FrozenMem struct {
	pages []page
	index []uint32 // room for the table's index, which FrozenShared copies (index_saved.go)
}

// FrozenSize is the size of a table's pages, for FrozenMem.
type FrozenSize struct {
	pages []pageSize
	index int             // slots of the table's index, for a copy of it (FrozenShared)
	par   parallel.Runner // the table's, for Alloc
}

type pageSize struct{ keys, data, live, touch, count int }

// FrozenSize reports the size of the memory a Frozen copy of the table
// takes now. It costs a few words per page.
func (t *Table) FrozenSize() FrozenSize {
	z := FrozenSize{pages: make([]pageSize, len(t.pages)), index: len(t.index), par: t.runner()}
	for i := range t.pages {
		p := &t.pages[i]
		z.pages[i] = pageSize{len(p.keys), len(p.data), len(p.live), len(p.touch), len(p.count)}
	}
	return z
}

// IndexOnly is z for the index's copy alone (FrozenShared takes the index
// into FrozenMem's memory only): for a cut after which no push is expected
// to copy a page, whose memory would be mapped for nothing.
func (z FrozenSize) IndexOnly() FrozenSize {
	z.pages = nil
	return z
}

// Alloc allocates the memory of z and writes a zero into each of its
// memory pages, spread over the cores by the table's Runner. It touches no
// table.
func (z FrozenSize) Alloc() *FrozenMem {
	m := &FrozenMem{pages: make([]page, len(z.pages))}
	if z.index > 0 {
		m.index = make([]uint32, z.index)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(m.index)), uintptr(len(m.index))*4)
		m.index = touched(m.index, 1024)
	}
	parallel.Or(z.par).Run(len(z.pages), func(i int) {
		s, q := z.pages[i], &m.pages[i]
		q.keys = touched(make([]uint64, s.keys), 512)
		q.data = touched(make([]float32, s.data), 1024)
		q.live = touched(make([]uint64, s.live), 512)
		if s.touch > 0 {
			q.touch = touched(make([]uint32, s.touch), 1024)
		}
		if s.count > 0 {
			q.count = touched(make([]uint32, s.count), 1024)
		}
	})
	return m
}

// touched writes a zero every step elements (4 KiB), so that the kernel
// maps the memory now; Go does not write fresh memory it got zeroed.
func touched[T uint64 | uint32 | float32](s []T, step int) []T {
	for i := 0; i < len(s); i += step {
		s[i] = 0
	}
	return s
}

// into copies src into dst's memory when it has the room, else into new
// memory, as append does.
func into[T uint64 | uint32 | float32](dst, src []T) []T {
	if cap(dst) < len(src) {
		dst = nil
	}
	return append(dst[:0], src...)
}
