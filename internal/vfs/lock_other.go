//go:build !linux

package vfs

import "errors"

// Lock is Locker's; only Linux's locks are used (elsewhere callers fall
// back to what they do without one).
func (osFS) Lock(name string) (func() error, error) { return nil, errors.ErrUnsupported }

// LockHeld is Locker's; see Lock.
func (osFS) LockHeld(string) (bool, error) { return false, errors.ErrUnsupported }
