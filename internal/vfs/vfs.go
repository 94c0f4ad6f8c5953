// Package vfs is the small filesystem interface the checkpoint code writes
// through, with two implementations: OS, the real disk, and Mem, an
// in-memory fake that can inject errors (a full disk on the Nth write, a
// failed fsync) and simulate a crash that loses everything not yet made
// durable. Tests of crash safety run against Mem; the same code runs against
// OS in production.
//
// The interface follows the shape of pebble's vfs.FS, cut down to what an
// atomic "write temp, fsync, rename, fsync directory" sequence needs.
//
// Durability contract (what Mem simulates and what callers must assume of a
// real disk): a file's contents are durable once File.Sync has returned; a
// directory entry (a created, renamed or removed name) is durable once
// SyncDir of the directory holding it has returned. Anything else may be lost
// in a crash.
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// File is an open file. A File is used by one goroutine at a time.
type File interface {
	io.Reader
	io.Writer
	io.Closer
	// Sync makes the file's contents durable (fsync).
	Sync() error
}

// MappedReader is an optional interface of a File. A reader that maps a
// file into memory instead of reading it (checkpoint.ReadShardMapped maps
// a File that has an Fd() uintptr method, as *os.File does) calls
// ReadMapped with the bytes it reads through the mapping as it reads them,
// so a wrapper that counts the bytes of Read (a progress meter) can count
// those too. It may be called from several goroutines at once.
type MappedReader interface {
	ReadMapped(n int64)
}

// FS is a filesystem. Implementations are safe for concurrent use.
//
// Names are slash- or OS-separated paths as accepted by package filepath.
// Errors are *fs.PathError or *os.LinkError values wrapping the cause, so
// errors.Is(err, fs.ErrNotExist) and errors.Is(err, syscall.ENOSPC) work.
type FS interface {
	// Create creates or truncates the named file and opens it for reading
	// and writing. The parent directory must exist.
	Create(name string) (File, error)
	// CreateExcl creates the named file and opens it for reading and
	// writing, failing with an error that wraps fs.ErrExist if the name
	// exists (O_CREATE|O_EXCL): of several callers, one wins.
	CreateExcl(name string) (File, error)
	// Open opens the named file for reading.
	Open(name string) (File, error)
	// Rename atomically replaces newname with oldname. The new name is
	// durable only after SyncDir of its directory.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Stat describes the named file or directory.
	Stat(name string) (fs.FileInfo, error)
	// SyncDir makes the directory's entries durable (fsync of the
	// directory): files created, renamed into or removed from it.
	SyncDir(dir string) error
}

// Locker is an optional interface of an FS: a lock that belongs to an
// open file, so that the kernel drops it when its holder's process ends,
// however it ends (kill -9 included), and a lock the whole filesystem sees
// where it keeps locks (on Linux, open-file-description locks, fcntl
// F_OFD_SETLK; NFS passes them to its server unless mounted nolock, in
// which case they are this host's alone). A lock taken twice in one
// process through two calls is refused the second time, as it is between
// processes.
type Locker interface {
	// Lock takes the exclusive lock of the named file, creating the file
	// if needed, without waiting. The error wraps ErrLockHeld if another
	// holder has it, and errors.ErrUnsupported if this filesystem keeps no
	// locks. unlock gives the lock back; the file stays.
	Lock(name string) (unlock func() error, err error)
	// LockHeld reports whether a holder has the named file's lock,
	// without taking it: false where the file does not exist. The error
	// wraps errors.ErrUnsupported if this filesystem keeps no locks.
	LockHeld(name string) (bool, error)
}

// ErrLockHeld is Locker.Lock's error for a lock another holder has.
var ErrLockHeld = errors.New("vfs: the lock is held by another open file")
