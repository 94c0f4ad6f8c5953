package hugemem

import "golang.org/x/sys/unix"

// advise asks the kernel to back the whole 2 MiB pages of b (which starts
// on a 2 MiB boundary and holds zeros) with huge pages: MADV_HUGEPAGE, then
// a write to each page so that those not yet touched fault in as huge
// pages, then MADV_COLLAPSE (Linux 6.1 and later) for those the Go heap had
// touched before, which the kernel copies into huge pages now rather than
// leaving them to khugepaged's slow scan. It returns the first error; a
// kernel that refuses leaves b as it was, on small pages.
func advise(b []float32) error {
	raw := bytesOf(b)
	raw = raw[:len(raw)&^(PageSize-1)]
	if len(raw) == 0 {
		return nil
	}
	if err := unix.Madvise(raw, unix.MADV_HUGEPAGE); err != nil {
		return err
	}
	for i := 0; i < len(raw); i += PageSize {
		raw[i] = 0
	}
	return unix.Madvise(raw, unix.MADV_COLLAPSE)
}
