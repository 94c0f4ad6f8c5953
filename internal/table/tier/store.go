package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// ErrStore: the store on disk failed (a full disk, a damaged file, an I/O
// error). The rows it held are lost to this process: the ps stops, and the
// shard is restored from its newest checkpoint.
var ErrStore = errors.New("tier: disk store failed")

// Store is the disk tier of one ps: one pebble database under a directory,
// holding the rows of every table, each table's rows under a key prefix of
// its own. It is safe for concurrent use (pebble's DB is); the Tables that
// use it are not.
type Store struct {
	db   *pebble.DB
	dir  string
	next uint32 // the prefix the next table gets; guarded by the owner's lock
}

// OpenStore opens a store in dir, which it creates, emptying whatever a
// previous process left there: the disk tier is memory that spills, not a
// record; a restarted ps restores its rows from the checkpoint.
//
// cacheBytes is pebble's block cache: index and filter blocks, and the
// data blocks read most, stay in memory there (part of the ps's memory
// beside the budget; 0: pebble's default, 8 MiB).
func OpenStore(dir string, cacheBytes int64) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no directory given", ErrStore)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("%w: emptying %s: %w", ErrStore, dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrStore, dir, err)
	}
	opts := &pebble.Options{
		// Nothing is recovered from the store after a crash (the
		// checkpoint is), so writes skip the log.
		DisableWAL: true,
		Logger:     quietLogger{},
		CacheSize:  cacheBytes,
		// A damaged file fails the read that meets it (ErrStore), not the
		// process: pebble's default would be Logger.Fatalf.
		EventListener: &pebble.EventListener{DataCorruption: func(pebble.DataCorruptionInfo) {}},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10) // a miss reads no block
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %w", ErrStore, dir, err)
	}
	return &Store{db: db, dir: dir, next: 1}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the store and removes its files.
func (s *Store) Close() error {
	err := s.db.Close()
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// DiskBytes is the size of the store's files.
func (s *Store) DiskBytes() int64 { return int64(s.db.Metrics().DiskSpaceUsage()) }

// Files lists the store's table files (for tests that damage one).
func (s *Store) Files() []string {
	m, _ := filepath.Glob(filepath.Join(s.dir, "*.sst"))
	return m
}

// keyOf writes the store key of a table's row: prefix then key, big-endian,
// so that a table's rows iterate in key order.
func keyOf(dst []byte, prefix uint32, key uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst[:0], prefix)
	return binary.BigEndian.AppendUint64(dst, key)
}

// bounds are the store keys of a table's rows: [lo, hi).
func bounds(prefix uint32) (lo, hi []byte) {
	return binary.BigEndian.AppendUint32(nil, prefix), binary.BigEndian.AppendUint32(nil, prefix+1)
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
