package tier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/paramserv/paramserv/internal/shard"
)

// A checkpoint of a table with a disk tier streams the rows on disk into
// its file as it streams the rows in memory (shard.Cut.StreamShard), with
// the process's memory kept to a few buffers: the cut's rows on disk are
// read once, in the store's own order, and written to files of their own
// beside the store, one a column of the checkpoint (keys, update counts,
// last touches, values, each state slot), each as the checkpoint's tensor
// lays it out. The checkpoint's writer then reads any range of a column
// with one pread, from as many goroutines as it makes pieces on.
//
// Why not fill the tensors from the store itself: the checkpoint's file
// holds a column after another, so every column would read the whole
// store again (its pages hold whole rows, each checked by its CRC), and a
// piece of a column at an offset needs the row at an index, which pebble
// cannot find without a scan. The column files cost the disk the
// checkpoint's bytes of the rows on disk for the time of the save; the
// kernel's page cache, not the process, holds them meanwhile.

// spillSeq names the column files of a store's cuts apart.
var spillSeq atomic.Int64

// columns is shard.TierColumns over the files Cut.Columns wrote.
//
// Concurrency: ReadAt may run from several goroutines at once (pread);
// Close after the last.
type columns struct {
	fs    vfs.FS
	n     int
	names []string
	files []vfs.File // by column (shard.ColKeys, ...); nil: not kept
}

func (c *columns) Len() int { return c.n }

func (c *columns) ReadAt(col int, dst []byte, off int64) error {
	if col < 0 || col >= len(c.files) || c.files[col] == nil {
		return fmt.Errorf("tier: the cut's rows have no column %d", col)
	}
	if n, err := c.files[col].ReadAt(dst, off); err != nil && !(n == len(dst) && errors.Is(err, io.EOF)) {
		return fmt.Errorf("tier: reading the cut's rows from %s at %d: %w", c.names[col], off, err)
	}
	return nil
}

// Close deletes the column files.
func (c *columns) Close() error {
	var first error
	for i, f := range c.files {
		if f == nil {
			continue
		}
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		if err := c.fs.Remove(c.names[i]); err != nil && first == nil {
			first = err
		}
		c.files[i] = nil
	}
	return first
}

// spillBuffer is each column file's write buffer.
const spillBuffer = 256 << 10

// Columns writes the cut's rows (those the hot table's cut lacks: the
// store's at the cut, overlaid by the changes not yet written; rows last
// touched before the eviction cutoff left out) to a file a column, in the
// store's order, beside the store; see shard.TierColumns. Its memory is a
// page of the store and a write buffer a column. Close the columns when
// done; the cut may be released before.
func (c *Cut) Columns() (shard.TierColumns, error) {
	t := c.t
	cols := &columns{fs: t.store.fs}
	if c.emptied {
		return cols, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	ncol := shard.ColValues + 1 + t.slots
	cols.names = make([]string, ncol)
	cols.files = make([]vfs.File, ncol)
	seq := spillSeq.Add(1)
	w := make([]*bufio.Writer, ncol)
	var werr error
	fail := func(err error) (shard.TierColumns, error) {
		_ = cols.Close()
		return nil, fmt.Errorf("tier: writing the rows on disk to %s for the checkpoint: %w", t.store.dir, err)
	}
	for i := range ncol {
		if i == shard.ColUpdates && !c.counts {
			continue
		}
		cols.names[i] = t.store.fs.PathJoin(t.store.dir, fmt.Sprintf("cut-%d-%d.col%d", t.prefix, seq, i))
		f, err := createRW(t.store.fs, cols.names[i])
		if err != nil {
			return fail(err)
		}
		cols.files[i] = f
		w[i] = bufio.NewWriterSize(f, spillBuffer)
	}
	d := c.dim
	var b [8]byte
	put64 := func(bw *bufio.Writer, x uint64) {
		binary.LittleEndian.PutUint64(b[:], x)
		if _, err := bw.Write(b[:]); err != nil && werr == nil {
			werr = err
		}
	}
	err := c.each(func(k uint64, row []byte) {
		touch := binary.LittleEndian.Uint64(row[4:])
		if int64(touch) < c.cutoff || werr != nil {
			return
		}
		cols.n++
		put64(w[shard.ColKeys], k)
		if c.counts {
			put64(w[shard.ColUpdates], uint64(binary.LittleEndian.Uint32(row)))
		}
		put64(w[shard.ColTouch], touch)
		// The row's floats are the columns' bytes already: value, then
		// each slot, float32 little-endian.
		f := row[12:]
		for s := range 1 + t.slots {
			if _, err := w[shard.ColValues+s].Write(f[4*d*s : 4*d*(s+1)]); err != nil && werr == nil {
				werr = err
			}
		}
	})
	if err != nil {
		return fail(err)
	}
	if werr != nil {
		return fail(werr)
	}
	for _, bw := range w {
		if bw != nil {
			if err := bw.Flush(); err != nil {
				return fail(err)
			}
		}
	}
	return cols, nil
}
