package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapAligned maps n bytes of zeroed anonymous memory starting on a 2 MiB
// boundary, marked for huge pages, or returns nil: it maps one huge page
// more than n, then unmaps the part before the boundary and the part past
// n (address space only: nothing was touched). The slice's capacity is
// the mapping's length (n rounded up to the system's page).
func mapAligned(n int) []byte {
	size := uintptr(n+4095) &^ 4095
	p, err := unix.MmapPtr(-1, 0, nil, size+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	off := (PageSize - uintptr(p)%PageSize) % PageSize
	if off > 0 {
		_ = unix.MunmapPtr(p, off)
	}
	if tail := PageSize - off; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, off+size), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, off)), size)
	_ = mark(b)
	return b[:n]
}

// unmap gives a mapping of mapAligned back.
func unmap(b []byte) { _ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b))) }
