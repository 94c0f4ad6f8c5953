//go:build unix

package cli

import "golang.org/x/sys/unix"

// openFileLimit is this process's limit on open files (ulimit -n).
func openFileLimit() (uint64, bool) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return lim.Cur, true
}
