package tier

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrStore: the store on disk failed (a full disk, a damaged file, an I/O
// error). The rows it held are lost to this process: the ps stops, and the
// shard is restored from its newest checkpoint.
var ErrStore = errors.New("tier: disk store failed")

// The engines a Store may keep its rows in.
const (
	// EngineHash is a file of fixed-size pages per table, found by the
	// key's hash (hashfile.go): a lookup reads one page, a write rewrites
	// the pages it changes, and nothing is rewritten in the background.
	// The default: on the million-row benchmark it does several times the
	// keys per CPU second of pebble (docs: see BenchmarkLarge*).
	EngineHash = "hash"
	// EnginePebble is one pebble database (an LSM tree) for every table,
	// each table's rows under a key prefix of its own: fewer bytes per row
	// on disk, but compactions that rewrite the rows again and again.
	EnginePebble = "pebble"
)

// Store is the disk tier of one ps: the rows of every table, in one of
// the engines (EngineHash, EnginePebble). It is safe for concurrent use;
// the Tables that use it are not.
//
// The store is not a record: it is emptied at every start (OpenStore), and
// a ps's rows come back from its checkpoint (or, under --replicas, from
// the shard's primary), so nothing in it is ever synced.
type Store struct {
	dir  string
	fs   vfs.FS
	kind string
	next atomic.Uint32 // the prefix the last table got (Load takes one with no lock held)

	pebble *pebbleEngine // one of the two
	hash   *hashEngine
}

// change is a change to a table's rows in the store: a row (encoded) or,
// with row nil, a deletion. over says the store may hold an older version
// of the row (pebble's write of a deletion depends on it; see entry).
type change struct {
	key  uint64
	row  []byte
	over bool
}

// rowStore is one table's rows in the store. get and view may run
// concurrently with write; writes come one at a time.
type rowStore interface {
	// get calls fn(i, row) for each of keys (ascending) found; row is
	// valid during the call only.
	get(keys []uint64, fn func(i int, row []byte)) error
	// write applies changes, ascending by key. A row without over is
	// of a key the store does not hold (the hash store adds it without
	// looking).
	write(ch []change) error
	// view is a consistent view of the rows now; release it when done.
	view() (rowView, error)
	// drop deletes every row; the rowStore is not used after.
	drop() error
}

// rowView is a view of one table's rows at one time.
type rowView interface {
	get(keys []uint64, fn func(i int, row []byte)) error
	// scan calls fn with every row (row valid during the call only), in
	// no set order.
	scan(fn func(k uint64, row []byte)) error
	release()
}

// OpenStore opens a store in dir, which it creates, emptying whatever a
// previous process left there: the disk tier is memory that spills, not a
// record; a restarted ps restores its rows from the checkpoint. It keeps
// its rows in the default engine, EngineHash.
//
// cacheBytes and memtableBytes size pebble's block cache and write buffer
// where the engine is pebble (0: pebble's defaults, 8 and 4 MiB).
func OpenStore(dir string, cacheBytes, memtableBytes int64) (*Store, error) {
	return openStore(dir, "", cacheBytes, memtableBytes, nil)
}

// openStore is OpenStore with engine kind ("": the default) over fs (nil:
// the disk's). Whatever the filesystem, syncs are skipped (noSyncFS).
func openStore(dir, kind string, cacheBytes, memtableBytes int64, fs vfs.FS) (*Store, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if kind == "" {
		kind = defaultEngine
	}
	if kind != EngineHash && kind != EnginePebble {
		return nil, fmt.Errorf("tier: store engine %q, want %q or %q", kind, EngineHash, EnginePebble)
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
	s := &Store{dir: dir, fs: fs, kind: kind}
	if kind == EngineHash {
		s.hash = &hashEngine{dir: dir, fs: noSyncFS{fs}}
		return s, nil
	}
	e, err := openPebble(dir, cacheBytes, memtableBytes, fs)
	if err != nil {
		return nil, err
	}
	s.pebble = e
	return s, nil
}

// defaultEngine is the engine of a store whose Config names none (a
// variable so that tests can run over both).
var defaultEngine = EngineHash

// Engine names the store's engine.
func (s *Store) Engine() string { return s.kind }

// Err is the first error of the store's writes in the background (pebble:
// a flush or a compaction that failed; hash: a write that failed, which
// may have left a page half written), nil if none.
func (s *Store) Err() error {
	var err error
	if s.pebble != nil {
		err = s.pebble.Err()
	} else {
		err = s.hash.Err()
	}
	if err != nil {
		return fmt.Errorf("%w: writing to %s: %w", ErrStore, s.dir, err)
	}
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the store and removes its files. A pebble store whose
// background work failed (Err) is not closed, since pebble's close waits
// for the flush it retries for ever; its files are removed all the same.
func (s *Store) Close() error {
	var err error
	if s.pebble != nil && s.pebble.Err() == nil {
		err = s.pebble.db.Close()
	}
	if rmErr := s.fs.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// DiskBytes is the size of the store's files.
func (s *Store) DiskBytes() int64 {
	if s.pebble != nil {
		return int64(s.pebble.db.Metrics().DiskSpaceUsage())
	}
	return s.hash.bytes.Load()
}

// Files lists the store's files of rows (for tests that damage one).
func (s *Store) Files() []string {
	pattern := "*.hash"
	if s.pebble != nil {
		pattern = "*.sst"
	}
	m, _ := filepath.Glob(filepath.Join(s.dir, pattern))
	return m
}

// table is the rows of a table whose prefix is prefix and whose rows are
// rowLen bytes.
func (s *Store) table(prefix uint32, rowLen int) (rowStore, error) {
	if s.pebble != nil {
		return &pebbleRows{e: s.pebble, prefix: prefix}, nil
	}
	h, err := s.hash.open(prefix, rowLen)
	if err != nil {
		return nil, fmt.Errorf("%w: creating a table's file in %s: %w", ErrStore, s.dir, err)
	}
	return h, nil
}

// view of a hashFile as a rowView: nil, not a nil *hashView, on an error
// (a caller that checks its view against nil would release a nil view).
func (h *hashFile) view() (rowView, error) {
	v, err := h.newView()
	if err != nil {
		return nil, err
	}
	return v, nil
}
