package tier

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// A restore read as a stream (LoadStream) comes a run of rows at a time,
// in the checkpoint's order: written to the hash store run by run, each
// run's rows land on pages all over the file, and every page is read and
// written again for each run (about 4.6 µs of CPU a row). Instead the rows
// for disk are gathered on the way in a file beside the store, in buckets
// by the top bits of their hash, which are ranges of the store's pages
// once its directory is sized for them all (hashFile.reserve); then each
// bucket in turn is read back and written page by page in order
// (hashFile.load), so that the store's file is written once, from start to
// end. The memory is a block buffer a bucket and one bucket's rows.

// loadBucketBytes is about the size of a bucket's rows, what load holds
// in memory at a time.
const loadBucketBytes = 4 << 20

// loadBlock is the size of a bucket's blocks in the spill file.
const loadBlock = 16 << 10

// loadSpill gathers the rows a LoadStream writes to a hash store. Not safe
// for concurrent use.
type loadSpill struct {
	t      *Table
	h      *hashFile
	f      vfs.File
	name   string
	bits   uint      // buckets: 1 << bits
	rec    int       // bytes a row: key, then the row as the store keeps it
	buf    [][]byte  // by bucket: its block being filled
	blocks [][]int64 // by bucket: where its full blocks lie in f
	size   int64     // f's length
	err    error
}

// newLoadSpill makes the spill file of about rows rows for t's hash store h.
func newLoadSpill(t *Table, h *hashFile, rows int) (*loadSpill, error) {
	rec := 8 + t.rowLen()
	total := int64(rows) * int64(rec)
	bits := uint(0)
	for bits < 10 && total>>bits > loadBucketBytes {
		bits++
	}
	s := &loadSpill{t: t, h: h, bits: bits, rec: rec, buf: make([][]byte, 1<<bits), blocks: make([][]int64, 1<<bits)}
	s.name = t.store.fs.PathJoin(t.store.dir, fmt.Sprintf("load-%d-%d", t.prefix, spillSeq.Add(1)))
	f, err := createRW(t.store.fs, s.name)
	if err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrStore, s.name, err)
	}
	s.f = f
	return s, nil
}

// bucket is the bucket of key k.
func (s *loadSpill) bucket(k uint64) int { return int(top(hashKey(k), s.bits)) }

// add gathers the rows of s not marked in hot (a row without a
// last-touched step gets clock), as writeCold would write them.
func (s *loadSpill) add(rows sparse.Snapshot, hot []bool, clock int64) error {
	t := s.t
	if t.err != nil {
		return t.err
	}
	encode := t.encoder(rows, clock)
	per := max(1, loadBlock/s.rec)
	for i, k := range rows.Keys {
		if hot[i] {
			continue
		}
		b := s.bucket(k)
		if s.buf[b] == nil {
			s.buf[b] = make([]byte, 0, per*s.rec)
		}
		p := s.buf[b]
		n := len(p)
		p = binary.LittleEndian.AppendUint64(p, k)
		encode(i, p[n+8:n+8:n+s.rec])
		s.buf[b] = p[:n+s.rec]
		t.filter.add(k)
		t.onDisk++
		if len(s.buf[b])+s.rec > cap(s.buf[b]) {
			s.flush(b)
		}
	}
	return s.err
}

// flush writes bucket b's block to the file.
func (s *loadSpill) flush(b int) {
	p := s.buf[b]
	if len(p) == 0 || s.err != nil {
		s.buf[b] = p[:0]
		return
	}
	if _, err := s.f.WriteAt(p, s.size); err != nil {
		s.err = fmt.Errorf("%w: writing %s: %w", ErrStore, s.name, err)
	}
	s.blocks[b] = append(s.blocks[b], s.size|int64(len(p))<<40)
	s.size += int64(len(p))
	s.buf[b] = p[:0]
}

// load writes the rows gathered into the store, a bucket at a time, in
// the order of the store's pages.
func (s *loadSpill) load() error {
	if s.err != nil {
		return s.err
	}
	var rows []byte
	for b := range s.buf {
		rows = rows[:0]
		for _, at := range s.blocks[b] {
			off, n := at&(1<<40-1), int(at>>40)
			rows = slices.Grow(rows, n)[:len(rows)+n]
			if _, err := s.f.ReadAt(rows[len(rows)-n:], off); err != nil {
				return fmt.Errorf("%w: reading %s: %w", ErrStore, s.name, err)
			}
		}
		rows = append(rows, s.buf[b]...)
		s.buf[b] = nil
		n := len(rows) / s.rec
		if n == 0 {
			continue
		}
		rec, size := s.rec, s.t.rowLen()
		err := s.h.load(n, func(j int) uint64 { return binary.LittleEndian.Uint64(rows[j*rec:]) },
			func(j int, dst []byte) { copy(dst[:size], rows[j*rec+8:(j+1)*rec]) })
		if err != nil {
			return fmt.Errorf("%w: writing to %s: %w", ErrStore, s.t.store.dir, err)
		}
	}
	return nil
}

// close deletes the spill file.
func (s *loadSpill) close() {
	_ = s.f.Close()
	_ = s.t.store.fs.Remove(s.name)
}
