package checkpoint

import (
	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/vfs"
)

// startWriteback asks the kernel to start writing bytes [off, off+n) of f
// to its disk, without waiting for them (sync_file_range), where f is an
// operating system file; it is advice, and a failure is ignored: the
// fsync after is what makes the file durable.
func startWriteback(f vfs.File, off, n int64) {
	if fd, ok := f.(interface{ Fd() uintptr }); ok {
		_ = unix.SyncFileRange(int(fd.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}
