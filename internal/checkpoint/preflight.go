package checkpoint

import (
	"fmt"
	"path/filepath"

	"github.com/paramserv/paramserv/internal/vfs"
)

// Before a shard file is read through, its header is read alone and the
// sizes it declares are compared with the file's length (issue 28: a 1 TiB
// sparse file whose manifest records its size and checksum, with a small
// header, took 60 s to list and 4.5 min to restore, read to its end before
// the header's disagreement was reported). The signal is the file's length,
// never its allocated blocks, which a compressing or deduplicating
// filesystem also reports smaller than the length.

// explainLimit is the largest file that is still read to its end when its
// header does not agree with it: there a checksum mismatch, found by
// reading, is the better explanation of a damaged header. A larger file's
// header error is reported at once.
const explainLimit = 64 << 20

// preflight reads the header of the shard file at path and reports, for a
// file over explainLimit, a header that does not parse or whose tensors do
// not end where the file does. For a reader that holds the whole file in
// memory (inMemory), it also refuses a file larger than this machine's
// memory before allocating it.
func preflight(fsys vfs.FS, cdir string, si ShardInfo, inMemory bool) error {
	if inMemory {
		if mem := physicalMemory(); mem > 0 && si.Size > mem {
			return fmt.Errorf("%s: the file is %d bytes, more than this machine's memory (%d bytes): not read into memory", si.File, si.Size, mem)
		}
	}
	if si.Size <= explainLimit {
		return nil
	}
	f, err := fsys.Open(filepath.Join(cdir, si.File))
	if err != nil {
		return fileError(si.File, err)
	}
	defer f.Close()
	if _, err := ReadHeader(f, si.Size); err != nil {
		return fmt.Errorf("%s: %w (the %d-byte file was not read further)", si.File, err, si.Size)
	}
	return nil
}
