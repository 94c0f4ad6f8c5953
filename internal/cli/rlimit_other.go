//go:build !unix

package cli

// openFileLimit: no such limit to read on this system.
func openFileLimit() (uint64, bool) { return 0, false }
