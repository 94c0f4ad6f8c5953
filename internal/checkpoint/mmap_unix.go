//go:build unix

package checkpoint

import (
	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/vfs"
)

// mapFile maps the first size bytes of f into memory, private and
// writable, if f is an operating-system file (one with a descriptor) and
// the system maps it; ok is false otherwise, and the caller reads the file
// instead. The mapping is the page cache's own pages: nothing is copied or
// zeroed; a write into it copies the page it writes, and never reaches the
// file (a restored table may keep keys and index there and go on writing
// them: sparse.Table.ImportIndexedInPlace).
// MADV_WILLNEED starts reading the whole file ahead, so the pages are
// mostly there by the time they are touched (measured on a 1 GB shard: 2.2×
// the restore's MB per CPU-second of a read into a buffer; MADV_SEQUENTIAL,
// which drops pages behind the reader, 1.5×; MAP_POPULATE 2.0× and waits
// for the whole file before the checksum starts). unmap must be called
// once the bytes are no longer used; the mapping outlives f.Close.
//
// The file must not shrink while the reader reads it (a read past its end
// faults; the reader reads with debug.SetPanicOnFault and calls that an
// error): checkpoint files are written whole under a temporary name and
// renamed, and never truncated in place, and removing one (pruning) leaves
// the mapping intact, but an outside tool may truncate one. What a holder
// keeps past the read is moved into anonymous memory first (ownPages), so
// nothing the ps goes on using is the file's.
func mapFile(f vfs.File, size int64) (b []byte, unmap func(), ok bool) {
	fd, isOS := f.(interface{ Fd() uintptr })
	if !isOS || size <= 0 || int64(int(size)) != size {
		return nil, nil, false
	}
	b, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, false
	}
	_ = unix.Madvise(b, unix.MADV_WILLNEED) // advice only
	return b, func() { _ = unix.Munmap(b) }, true
}

// dropPages gives back the pages of b, part of a private mapping of a file
// (mapFile), which no one reads any more: reading them again would read
// the file. Advice only.
func dropPages(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_DONTNEED)
	}
}
