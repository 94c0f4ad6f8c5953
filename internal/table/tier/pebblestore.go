package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleEngine is the store as one pebble database (EnginePebble): every
// table's rows under a key prefix of its own.
type pebbleEngine struct {
	db *pebble.DB

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

func (e *pebbleEngine) Err() error {
	if p := e.bgErr.Load(); p != nil {
		return *p
	}
	return nil
}

// openPebble opens a pebble database in dir (made empty).
//
// cacheBytes is pebble's block cache: index and filter blocks, and the
// data blocks read most, stay in memory there (part of the ps's memory
// beside the budget; 0: pebble's default, 8 MiB); memtableBytes is the
// size of its write buffer (0: pebble's default, 4 MiB).
func openPebble(dir string, cacheBytes, memtableBytes int64, fs vfs.FS) (*pebbleEngine, error) {
	e := &pebbleEngine{}
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
			BackgroundError:   func(err error) { e.bgErr.CompareAndSwap(nil, &err) },
			PossibleAPIMisuse: func(pebble.PossibleAPIMisuseInfo) { e.misuse.Add(1) },
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
	e.db = db
	return e, nil
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

// pebbleRows is one table's rows in a pebbleEngine.
type pebbleRows struct {
	e      *pebbleEngine
	prefix uint32
}

// reader is what pebbleRows and pebbleView read through.
type reader interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
	Get([]byte) ([]byte, io.Closer, error)
}

func getRows(r reader, prefix uint32, keys []uint64, fn func(i int, row []byte)) error {
	var key []byte
	if len(keys) <= 8 {
		for i, k := range keys {
			key = keyOf(key, prefix, k)
			v, closer, err := r.Get(key)
			if errors.Is(err, pebble.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			fn(i, v)
			closer.Close()
		}
		return nil
	}
	// One iterator for keys in order reads each block once.
	lo, hi := bounds(prefix)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for i, k := range keys {
		key = keyOf(key, prefix, k)
		// A prefix seek (the whole key is the prefix) asks each table
		// file's Bloom filter first, and reads a data block only from
		// the file that holds the key, not one from every level.
		if !it.SeekPrefixGE(key) || string(it.Key()) != string(key) {
			if err := it.Error(); err != nil {
				return err
			}
			continue
		}
		fn(i, it.Value())
	}
	return nil
}

func (r *pebbleRows) get(keys []uint64, fn func(i int, row []byte)) error {
	return getRows(r.e.db, r.prefix, keys, fn)
}

// write writes changes in one batch. The store holds at most one version
// of a key that is not deleted, so a deletion is a SingleDelete, which
// vanishes with the Set it meets in a compaction instead of going down to
// the last level as a tombstone; where the store may hold an older version
// (over), a row is written as Delete and Set, a deletion as a Delete.
func (r *pebbleRows) write(ch []change) error {
	// Past a failed flush pebble would stall this write for ever.
	if err := r.e.Err(); err != nil {
		return err
	}
	b := r.e.db.NewBatch()
	defer b.Close()
	var key []byte
	// In key order: the memtable's inserts then walk its skiplist
	// forwards, and a batch too large for it, which pebble sorts, comes
	// sorted.
	for _, c := range ch {
		key = keyOf(key, r.prefix, c.key)
		var err error
		switch {
		case c.row == nil && !c.over:
			err = b.SingleDelete(key, nil)
		case c.over:
			if err = b.Delete(key, nil); err == nil && c.row != nil {
				err = b.Set(key, c.row, nil)
			}
		default:
			err = b.Set(key, c.row, nil)
		}
		if err != nil {
			return err
		}
	}
	return r.e.db.Apply(b, pebble.NoSync)
}

func (r *pebbleRows) view() (rowView, error) {
	return &pebbleView{snap: r.e.db.NewSnapshot(), prefix: r.prefix}, nil
}

func (r *pebbleRows) drop() error {
	lo, hi := bounds(r.prefix)
	return r.e.db.DeleteRange(lo, hi, pebble.NoSync)
}

// pebbleView is a pebble snapshot of one table's rows.
type pebbleView struct {
	snap   *pebble.Snapshot
	prefix uint32
}

func (v *pebbleView) get(keys []uint64, fn func(i int, row []byte)) error {
	return getRows(v.snap, v.prefix, keys, fn)
}

func (v *pebbleView) scan(fn func(k uint64, row []byte)) error {
	lo, hi := bounds(v.prefix)
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		fn(binary.BigEndian.Uint64(it.Key()[4:]), it.Value())
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

func (v *pebbleView) release() { v.snap.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
