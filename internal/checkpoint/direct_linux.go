package checkpoint

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/vfs"
)

// startDirect turns on O_DIRECT for f where f is an operating system file
// (it has an Fd() uintptr method, as *os.File has) on a filesystem that
// takes it, so that the whole blocks writePieces writes go from its
// buffers to the disk without a copy into the page cache; the fsync that
// follows then waits for the file's metadata only. Where O_DIRECT is
// refused, or f is not such a file, the directOut it returns writes
// through the page cache, as f.Write does.
func startDirect(f vfs.File) *directOut {
	d := &directOut{f: f, fd: -1}
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return d
	}
	d.fd = int(fd.Fd())
	flags, err := unix.FcntlInt(uintptr(d.fd), unix.F_GETFL, 0)
	if err != nil {
		return d
	}
	if _, err := unix.FcntlInt(uintptr(d.fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return d // the filesystem refuses O_DIRECT
	}
	d.flags, d.on = flags, true
	return d
}

// stop writes what follows through the page cache.
func (d *directOut) stop() {
	if !d.on {
		return
	}
	d.on = false
	// Should this fail, the writes that follow fail too, and say so.
	_, _ = unix.FcntlInt(uintptr(d.fd), unix.F_SETFL, d.flags)
}

// refused says whether a direct write's error is the kernel refusing
// O_DIRECT for this file or buffer (EINVAL: the filesystem or the device
// takes no direct writes, or not of this alignment), so that the bytes
// are written again through the page cache.
func refused(err error) bool { return errors.Is(err, unix.EINVAL) }
