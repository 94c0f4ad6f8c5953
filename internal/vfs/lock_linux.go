package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Lock is Locker's: an exclusive open-file-description lock on the whole
// file, which the kernel drops when the file is closed, by unlock or by
// the process's end.
func (osFS) Lock(name string) (func() error, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		return nil, lockError(name, err)
	}
	return f.Close, nil
}

// LockHeld is Locker's (fcntl F_OFD_GETLK).
func (osFS) LockHeld(name string) (bool, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false, lockError(name, err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

func lockError(name string, err error) error {
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %s", ErrLockHeld, name)
	case errors.Is(err, unix.ENOLCK), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("lock %s: %w (%w)", name, errors.ErrUnsupported, err)
	}
	return &fs.PathError{Op: "lock", Path: name, Err: err}
}
