//go:build !linux

package hugemem

// advise does nothing where there is no madvise for huge pages.
func advise(raw []byte) error { return nil }

// mark does nothing where there is no madvise for huge pages.
func mark(raw []byte) error { return nil }
