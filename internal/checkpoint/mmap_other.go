//go:build !unix

package checkpoint

import "github.com/paramserv/paramserv/internal/vfs"

// mapFile never maps on this system: the caller reads the file.
func mapFile(vfs.File, int64) ([]byte, func(), bool) { return nil, nil, false }

// dropPages does nothing where files are not mapped.
func dropPages([]byte) {}
