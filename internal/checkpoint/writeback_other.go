//go:build !linux

package checkpoint

import "github.com/paramserv/paramserv/internal/vfs"

// startWriteback does nothing where there is no sync_file_range.
func startWriteback(vfs.File, int64, int64) {}
