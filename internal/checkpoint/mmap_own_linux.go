package checkpoint

import (
	"fmt"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ownPages puts anonymous memory holding the same bytes in place of b,
// whole pages of a private mapping of a file (mapFile; b starts on a
// page), so that nothing in b is the file's any more: truncating a file
// takes its pages out of every mapping of it, the private copies a write
// made included (the kernel's even_cows), and the next touch of one
// faults the process (SIGBUS), while anonymous memory stays. The bytes are
// copied into fresh memory, which is then moved over b (mremap
// MREMAP_FIXED): no goroutine may write b meanwhile. An error says that a
// page could not be read (the file shrank already, or the disk failed);
// b is then as it was, as it is where the system refuses the move.
func ownPages(b []byte) (err error) {
	if len(b) == 0 {
		return nil
	}
	n := uintptr((len(b) + pageSize - 1) &^ (pageSize - 1))
	p, err := unix.MmapPtr(-1, 0, nil, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mapping %d bytes of memory: %w", n, err)
	}
	fresh := unsafe.Slice((*byte)(p), n)
	// Huge pages where the system gives them, made at once: fresh memory
	// costs a fault and a zeroing each page (on a 38 MB piece of a
	// restore at load 30, 190 ms of CPU with 4 KiB pages one by one, 100
	// with MAP_POPULATE, 50-110 huge and populated). Advice only.
	_ = unix.Madvise(fresh, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(fresh, unix.MADV_POPULATE_WRITE)
	if err := copyFaulting(fresh, b); err != nil {
		unix.MunmapPtr(p, n)
		return err
	}
	if _, err := unix.MremapPtr(p, n, unsafe.Pointer(unsafe.SliceData(b)), n, unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED); err != nil {
		// Left as it was (a file truncated later faults, as before):
		// not this restore's failure.
		unix.MunmapPtr(p, n)
	}
	return nil
}

// copyFaulting copies src into dst, a fault reading src an error.
func copyFaulting(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer catchFault(&err, src)
	copy(dst, src)
	return nil
}
