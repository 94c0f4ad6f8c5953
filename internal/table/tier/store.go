package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
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
	fs   vfs.FS
	next atomic.Uint32 // the prefix the last table got (Load takes one with no lock held)

	// bgErr is the first error of pebble's background work (a flush or a
	// compaction that could not write: a full disk). Pebble retries a
	// failed flush for ever and, once its memtables are full, stalls
	// writes: the tier stops at the first such error instead (Err).
	bgErr atomic.Pointer[error]

	// misuse counts the SingleDeletes pebble found that met no row or
	// more than one (see entry): a bug of the Table's, which tests check
	// for.
	misuse atomic.Int64
}

// OpenStore opens a store in dir, which it creates, emptying whatever a
// previous process left there: the disk tier is memory that spills, not a
// record; a restarted ps restores its rows from the checkpoint.
//
// cacheBytes is pebble's block cache: index and filter blocks, and the
// data blocks read most, stay in memory there (part of the ps's memory
// beside the budget; 0: pebble's default, 8 MiB); memtableBytes is the
// size of its write buffer (0: pebble's default, 4 MiB).
func OpenStore(dir string, cacheBytes, memtableBytes int64) (*Store, error) {
	return openStore(dir, cacheBytes, memtableBytes, nil)
}

// openStore is OpenStore over fs (nil: the disk's). Whatever the
// filesystem, syncs are skipped (noSyncFS).
func openStore(dir string, cacheBytes, memtableBytes int64, fs vfs.FS) (*Store, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: no directory given", ErrStore)
	}
	if err := fs.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("%w: emptying %s: %w", ErrStore, dir, err)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrStore, dir, err)
	}
	s := &Store{dir: dir, fs: fs}
	opts := &pebble.Options{
		// Nothing is recovered from the store after a crash (the
		// checkpoint is), so writes skip the log.
		DisableWAL: true,
		FS:         noSyncFS{fs},
		Logger:     quietLogger{},
		CacheSize:  cacheBytes,
		// Up to two memtables are in memory at once (one being flushed);
		// demoted rows are read back from them without a disk read.
		MemTableSize: uint64(memtableBytes),
		// A damaged file fails the read that meets it (ErrStore), not the
		// process: pebble's default would be Logger.Fatalf.
		EventListener: &pebble.EventListener{
			DataCorruption:    func(pebble.DataCorruptionInfo) {},
			BackgroundError:   func(err error) { s.bgErr.CompareAndSwap(nil, &err) },
			PossibleAPIMisuse: func(pebble.PossibleAPIMisuseInfo) { s.misuse.Add(1) },
		},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10) // a miss reads no block
		// Rows are floats, which compress little: decoding every block
		// read costs more than the bytes it saves.
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	// Sixteen sublevels of L0 before a compaction into the levels below,
	// not four: rows are written at random keys, so each L0 compaction
	// rewrites the whole key range below it, and the more L0 holds, the
	// fewer rewrites. A lookup pays little for the extra files: their
	// Bloom filters, in the cache, rule most out.
	opts.L0CompactionThreshold = 16
	opts.L0StopWritesThreshold = 64
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %w", ErrStore, dir, err)
	}
	s.db = db
	return s, nil
}

// Err is the first error of the store's background work (a flush or a
// compaction that failed: a full disk), nil if none.
func (s *Store) Err() error {
	if p := s.bgErr.Load(); p != nil {
		return fmt.Errorf("%w: writing to %s: %w", ErrStore, s.dir, *p)
	}
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the store and removes its files. A store whose background
// work failed (Err) is not closed, since pebble's close waits for the flush
// it retries for ever; its files are removed all the same.
func (s *Store) Close() error {
	var err error
	if s.Err() == nil {
		err = s.db.Close()
	}
	if rmErr := s.fs.RemoveAll(s.dir); err == nil {
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
