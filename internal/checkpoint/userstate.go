package checkpoint

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/paramserv/paramserv/internal/vfs"
)

// A program's own state saved with a checkpoint (the Python worker's
// optimizer and scheduler state_dicts, its data position and RNG state:
// bytes this package does not read), in ckpt-<step>/user_state.bin: the
// 8-byte magic, the length as a little-endian uint64, the CRC-32C of the
// bytes as a little-endian uint32, then the bytes. The chief writes it
// after every shard and before the manifest, so a complete checkpoint
// holds its state; it is removed with its checkpoint.

// UserStateName is the file of a program's state in a checkpoint's directory.
const UserStateName = "user_state.bin"

// MaxUserState bounds the program's state read back (8 GiB).
const MaxUserState = 8 << 30

var userStateMagic = [8]byte{'P', 'S', 'U', 'S', 'T', 'A', 'T', '1'}

const userStateHeader = 8 + 8 + 4

// WriteUserState writes b as the program's state of the checkpoint of
// step in dir, atomically; the checkpoint's directory must exist (its
// shards are written first).
func WriteUserState(fsys vfs.FS, dir string, step int64, b []byte) error {
	if len(b) > MaxUserState {
		return fmt.Errorf("checkpoint: %s of step %d: %d bytes, more than %d", UserStateName, step, len(b), MaxUserState)
	}
	var h [userStateHeader]byte
	copy(h[:], userStateMagic[:])
	binary.LittleEndian.PutUint64(h[8:], uint64(len(b)))
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(b, castagnoli))
	return writeAtomic(fsys, filepath.Join(dir, CheckpointName(step)), UserStateName, func(w io.Writer) error {
		if _, err := w.Write(h[:]); err != nil {
			return err
		}
		_, err := w.Write(b)
		return err
	})
}

// ReadUserState reads the program's state of the checkpoint of step in
// dir. A checkpoint saved without one gives an error that wraps
// fs.ErrNotExist; a damaged file, ErrFormat.
func ReadUserState(fsys vfs.FS, dir string, step int64) ([]byte, error) {
	path := filepath.Join(dir, CheckpointName(step), UserStateName)
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", fileError(path, err))
	}
	defer f.Close()
	var h [userStateHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil, errorf(ErrFormat, "checkpoint: %s: header: %v", path, err)
	}
	if [8]byte(h[:8]) != userStateMagic {
		return nil, errorf(ErrFormat, "checkpoint: %s: not a program state file (magic %q)", path, h[:8])
	}
	n := binary.LittleEndian.Uint64(h[8:])
	if n > MaxUserState {
		return nil, errorf(ErrFormat, "checkpoint: %s: says %d bytes, more than %d", path, n, MaxUserState)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, errorf(ErrFormat, "checkpoint: %s: %d bytes announced: %v", path, n, err)
	}
	if extra, _ := f.Read(make([]byte, 1)); extra > 0 {
		return nil, errorf(ErrFormat, "checkpoint: %s: longer than the %d bytes announced", path, n)
	}
	if got, want := crc32.Checksum(b, castagnoli), binary.LittleEndian.Uint32(h[16:]); got != want {
		return nil, errorf(ErrFormat, "checkpoint: %s: CRC-32C %08x, the header says %08x (damaged)", path, got, want)
	}
	return b, nil
}
