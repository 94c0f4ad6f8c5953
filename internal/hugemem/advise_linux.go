package hugemem

import "golang.org/x/sys/unix"

// advise asks the kernel to back the whole 2 MiB pages of raw (which starts
// on a 2 MiB boundary) with huge pages, keeping its contents:
// MADV_HUGEPAGE marks the range; MADV_POPULATE_WRITE (Linux 5.14) faults
// in the pages not yet touched, now as huge pages; MADV_COLLAPSE (Linux
// 6.1) copies those the Go heap had touched before into huge pages now
// rather than leaving them to khugepaged's slow scan. It returns the first
// error; a kernel that refuses leaves the rest on small pages.
func advise(raw []byte) error {
	raw = raw[:len(raw)&^(PageSize-1)]
	if len(raw) == 0 {
		return nil
	}
	if err := unix.Madvise(raw, unix.MADV_HUGEPAGE); err != nil {
		return err
	}
	if err := unix.Madvise(raw, unix.MADV_POPULATE_WRITE); err != nil {
		return err
	}
	return unix.Madvise(raw, unix.MADV_COLLAPSE)
}

// mark asks the kernel to back the whole 2 MiB pages of raw (which starts
// on a 2 MiB boundary) with huge pages as they are first touched.
func mark(raw []byte) error {
	raw = raw[:len(raw)&^(PageSize-1)]
	if len(raw) == 0 {
		return nil
	}
	return unix.Madvise(raw, unix.MADV_HUGEPAGE)
}
