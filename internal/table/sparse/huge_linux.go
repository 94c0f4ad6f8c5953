package sparse

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back the whole 2 MiB pages within the n
// bytes at p with huge pages (transparent huge pages in "madvise" mode,
// the usual default): memory a restore fills whole at once then faults in
// once a 2 MiB page instead of once a 4 KiB one, and the random reads of
// the index miss the TLB less. Advice only: an error changes nothing.
func adviseHuge(p unsafe.Pointer, n uintptr) {
	const huge = 2 << 20
	off := (huge - uintptr(p)%huge) % huge
	if n <= off {
		return
	}
	if size := (n - off) &^ (huge - 1); size > 0 {
		_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, off)), size), syscall.MADV_HUGEPAGE)
	}
}
