package checkpoint

import (
	"unsafe"

	"github.com/paramserv/paramserv/internal/vfs"
)

// directAlign is the alignment of the buffers, lengths and file offsets of
// direct writes: a page, a multiple of every disk's logical block.
const directAlign = 4096

// directOut writes a file in order, its whole directAlign blocks past the
// page cache (O_DIRECT, where startDirect could turn it on) and the rest
// through it. Its writes' buffers must start at directAlign boundaries
// (alignedBuffer) and every write but the last be a multiple of
// directAlign long; a write the kernel refuses to take directly is
// written again, and every write after it, through the page cache. The
// file's bytes are the same either way. A directOut is used by one
// goroutine.
type directOut struct {
	f     vfs.File
	fd    int  // f's descriptor, or -1
	on    bool // O_DIRECT is set on fd
	flags int  // fd's status flags before O_DIRECT was set
}

// Write writes b to the file at its offset.
func (d *directOut) Write(b []byte) (int, error) {
	if !d.on {
		return d.f.Write(b)
	}
	whole := len(b) &^ (directAlign - 1)
	n := 0
	if whole > 0 {
		k, err := d.f.Write(b[:whole])
		if k == 0 && err != nil && refused(err) {
			d.stop()
			return d.f.Write(b)
		}
		n += k
		if err != nil {
			return n, err
		}
	}
	if whole < len(b) {
		// The file's last bytes, not a whole block: through the page
		// cache.
		d.stop()
		k, err := d.f.Write(b[whole:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// alignedBuffer returns n bytes whose first starts at a directAlign
// boundary.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & (directAlign - 1)
	return b[off : off+n : off+n]
}
