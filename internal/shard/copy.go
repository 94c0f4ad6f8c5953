package shard

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// copyHeader is the part of a shard's copy that is not tensors.
type copyHeader struct {
	Layout      Layout           `json:"layout"`
	Updates     []int64          `json:"updates"`
	Tracker     consistency.Copy `json:"tracker"`
	Done        []int            `json:"done,omitempty"`
	Incarnation uint64           `json:"incarnation"`
	Pending     bool             `json:"pending,omitempty"` // sync: the current step has gradients
	Tables      []tableCopy      `json:"tables,omitempty"`
}

// tableCopy is a table's part of a copy's header; its rows follow the
// dense tensors (decodeTable reads them).
type tableCopy struct {
	Rows    int   `json:"rows"`
	Updates bool  `json:"updates,omitempty"`
	Touch   bool  `json:"touch,omitempty"`
	Clock   int64 `json:"clock"`
	Base    int64 `json:"base"`
	Sketch  int   `json:"sketch,omitempty"` // admission counters, one byte each
	// SketchCells, if > 0: the counters are sent as that many (u32 index,
	// u8 count) pairs of the cells not zero (a sketch is mostly zeros:
	// megabytes of counters for a few thousand keys).
	SketchCells int          `json:"sketch_cells,omitempty"`
	Stats       sparse.Stats `json:"stats"`
	Acc         int          `json:"acc,omitempty"` // sync: keys accumulated this step
	// AnyOrder: the rows are not in key order (a tier's rows on disk
	// follow those in memory, in the tier's order).
	AnyOrder bool `json:"any_order,omitempty"`
}

// EncodeCopy is the shard's whole state as bytes, for a replica that
// rejoins (docs/REPLICATION.md): the layout, the tracker, the workers done
// and the incarnation, then each variable's values, optimizer slots and
// (sync) accumulated gradients, little-endian. DecodeCopy of it gives a
// shard that behaves bit for bit as this one, sparse tables included
// (rows, optimizer state, admission counts, sync accumulators), with the
// rows of their second tiers. It is CutCopy and Encode, all under the
// caller's lock; a caller that can, takes the cut under its lock and
// encodes with the lock released.
func (s *Shard) EncodeCopy() ([]byte, error) {
	c := s.CutCopy()
	defer c.Release()
	return c.Encode()
}

// CopyCut is a shard's state for a copy (EncodeCopy), as it stood at
// CutCopy: the header's parts, the dense variables copied, each table
// frozen as a checkpoint's Cut freezes it (its pages shared copy on write)
// with its second tier's cut (a snapshot of its store). Encode reads it
// with no lock held while the shard trains on.
type CopyCut struct {
	h      copyHeader
	empty  bool        // the shard has no state
	dense  [][]float32 // values, then each variable's slots and accumulated gradients, in encoding order
	tables []copyTable
}

type copyTable struct {
	name    string
	t       *sparse.Table // a frozen copy (FrozenShared)
	cold    TierCut       // nil: no second tier
	extra   sparse.Extra
	accKeys []uint64
	acc     []float32
}

// CutCopy takes the cut for a copy; call it under the caller's lock. Its
// cost is a Cut's (the dense variables copied, a few words a table page)
// and a copy of the admission sketches; the rows are read by Encode.
// Release it when done.
func (s *Shard) CutCopy() *CopyCut {
	if s.st == nil {
		return &CopyCut{empty: true, h: copyHeader{Incarnation: s.incarnation, Done: s.DoneWorkers()}}
	}
	c := &CopyCut{h: copyHeader{Layout: s.st.layout, Tracker: s.st.tracker.Copy(), Done: s.DoneWorkers(), Incarnation: s.incarnation, Pending: !s.pendingSince.IsZero()}}
	// The header as it stands (Encode marshals it later, off the lock).
	if b, err := json.Marshal(c.h); err == nil {
		var h copyHeader
		if json.Unmarshal(b, &h) == nil {
			c.h = h
		}
	}
	for _, v := range s.st.order {
		c.h.Updates = append(c.h.Updates, v.updates)
		c.dense = append(c.dense, slices.Clone(v.value)) // values first, as Build fills them
	}
	for _, v := range s.st.order {
		for _, st := range v.state {
			c.dense = append(c.dense, slices.Clone(st))
		}
		if v.accum != nil {
			c.dense = append(c.dense, slices.Clone(v.accum))
		}
	}
	for _, t := range s.st.tableOrd {
		ct := copyTable{name: t.name, t: t.t.FrozenShared(nil), extra: t.t.Extra(), accKeys: slices.Clone(t.accKeys), acc: slices.Clone(t.acc)}
		if t.tier != nil {
			ct.cold = t.tier.Cut()
		}
		c.tables = append(c.tables, ct)
	}
	return c
}

// Release lets go of the tables' pages and the tiers' cuts. It may be
// called more than once.
func (c *CopyCut) Release() {
	for i := range c.tables {
		t := &c.tables[i]
		if t.t != nil {
			t.t.Release()
			t.t = nil
		}
		if t.cold != nil {
			t.cold.Release()
			t.cold = nil
		}
	}
}

// Encode is the copy's bytes (see EncodeCopy): the tables' rows are read
// from the frozen tables and the tiers' snapshots. It takes no lock, and
// may be called once, before Release.
func (c *CopyCut) Encode() ([]byte, error) {
	p, err := c.plan()
	if err != nil {
		return nil, err
	}
	defer p.close()
	w := sliceWriter(make([]byte, 0, p.size))
	if err := p.write(&w); err != nil {
		return nil, err
	}
	return w, nil
}

// WriteTo writes the copy's bytes (Encode's) to w, the rows on a tier's
// disk read from its cut's column files (TierCut.Columns) a piece at a
// time: its memory is the table's rows in memory and a piece, whatever
// the tier holds. It takes no lock, and may be called once, before
// Release. DecodeCopyFrom reads what it wrote.
func (c *CopyCut) WriteTo(w io.Writer) (int64, error) {
	p, err := c.plan()
	if err != nil {
		return 0, err
	}
	defer p.close()
	bw := &countWriter{w: bufio.NewWriterSize(w, copyPiece)}
	if err := p.write(bw); err != nil {
		return bw.n, err
	}
	return bw.n, bw.w.(*bufio.Writer).Flush()
}

// copyPiece is how many bytes of a tier's column a copy reads at a time.
const copyPiece = 1 << 20

// copyPlan is a CopyCut's bytes laid out: the header and each table's
// rows, those in memory exported and those on disk in column files.
type copyPlan struct {
	c    *CopyCut
	hb   []byte
	size int64
	hot  []sparse.Snapshot
	cold []TierColumns // nil: the table's rows are all in hot
}

func (c *CopyCut) plan() (*copyPlan, error) {
	p := &copyPlan{c: c}
	h := c.h
	if c.empty {
		hb, err := json.Marshal(h)
		p.hb, p.size = hb, int64(4+len(hb))
		return p, err
	}
	var n int64
	for _, d := range c.dense {
		n += int64(len(d))
	}
	p.hot = make([]sparse.Snapshot, len(c.tables))
	p.cold = make([]TierColumns, len(c.tables))
	for i := range c.tables {
		t := &c.tables[i]
		sn := t.t.Export()
		p.hot[i] = sn
		e := &t.extra
		tc := tableCopy{
			Rows: len(sn.Keys), Updates: sn.Updates != nil, Touch: sn.LastTouch != nil,
			Clock: e.Clock, Base: e.Base, Sketch: len(e.Sketch), Stats: e.Stats, Acc: len(t.accKeys),
		}
		if t.cold != nil {
			cols, err := t.cold.Columns()
			if err != nil {
				p.close()
				return nil, fmt.Errorf("shard: a copy of table %q: %w", t.name, err)
			}
			if cols.Len() == 0 {
				_ = cols.Close()
			} else {
				// The rows on disk follow those in memory, in the tier's
				// order (decodeTable takes them in any order). The
				// tier's rows may be older than the table's own: the
				// copy's steps are stored from the oldest.
				p.cold[i] = cols
				tc.Rows += cols.Len()
				tc.AnyOrder = true
				if tc.Touch {
					oldest, err := minTouch(cols)
					if err != nil {
						p.close()
						return nil, fmt.Errorf("shard: a copy of table %q: %w", t.name, err)
					}
					if len(sn.LastTouch) > 0 {
						oldest = min(oldest, slices.Min(sn.LastTouch))
					}
					e.Base = min(e.Base, oldest)
					tc.Base = e.Base
				}
			}
		}
		nz := 0
		for _, x := range e.Sketch {
			if x != 0 {
				nz++
			}
		}
		if 5*nz < len(e.Sketch) {
			tc.SketchCells = nz
		}
		h.Tables = append(h.Tables, tc)
		rows, dim := int64(tc.Rows), int64(sn.Dim)
		n += 2*rows + rows*dim*int64(1+len(sn.State)) + int64(len(t.accKeys))*2 + int64(len(t.acc))
		if tc.Updates {
			n += rows
		}
		if tc.Touch {
			n += 2 * rows
		}
		if tc.SketchCells > 0 {
			n += (5*int64(nz) + 3) / 4
		} else {
			n += (int64(len(e.Sketch)) + 3) / 4
		}
	}
	hb, err := json.Marshal(h)
	if err != nil {
		p.close()
		return nil, err
	}
	c.h.Tables = h.Tables
	p.hb, p.size = hb, int64(4+len(hb))+4*n+64
	return p, nil
}

// minTouch is the oldest last-touched step of cols's rows.
func minTouch(cols TierColumns) (int64, error) {
	oldest := int64(math.MaxInt64)
	err := readColumn(cols, ColTouch, 8*int64(cols.Len()), func(b []byte) error {
		for i := 0; i+8 <= len(b); i += 8 {
			oldest = min(oldest, int64(binary.LittleEndian.Uint64(b[i:])))
		}
		return nil
	})
	return oldest, err
}

// readColumn calls f with bytes [0, size) of column col of cols, a piece
// at a time (a whole number of 8-byte words, f must not keep it).
func readColumn(cols TierColumns, col int, size int64, f func([]byte) error) error {
	buf := make([]byte, min(size, copyPiece))
	for off := int64(0); off < size; {
		b := buf[:min(int64(len(buf)), size-off)]
		if err := cols.ReadAt(col, b, off); err != nil {
			return err
		}
		if err := f(b); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

func (p *copyPlan) close() {
	for i, cols := range p.cold {
		if cols != nil {
			_ = cols.Close()
			p.cold[i] = nil
		}
	}
}

// write writes the copy's bytes to w.
func (p *copyPlan) write(w io.Writer) error {
	cw := &copyWriter{w: w}
	if err := cw.put(binary.LittleEndian.AppendUint32(nil, uint32(len(p.hb)))); err != nil {
		return err
	}
	if err := cw.put(p.hb); err != nil {
		return err
	}
	if p.c.empty {
		return nil
	}
	for _, d := range p.c.dense {
		if err := cw.floats(d); err != nil {
			return err
		}
	}
	for i := range p.c.tables {
		if err := p.writeTable(cw, i); err != nil {
			return err
		}
	}
	return cw.flush(true)
}

// writeTable writes table i's bytes: its rows in memory, then those on
// disk as they lie in the cut's column files, a column at a time.
func (p *copyPlan) writeTable(cw *copyWriter, i int) error {
	t, sn, cols, tc := p.c.tables[i], p.hot[i], p.cold[i], p.c.h.Tables[i]
	var cn int64
	if cols != nil {
		cn = int64(cols.Len())
	}
	if err := cw.uints(sn.Keys); err != nil {
		return err
	}
	if err := cw.column(cols, ColKeys, 8*cn); err != nil {
		return err
	}
	if err := cw.floats(sn.Values); err != nil {
		return err
	}
	rowBytes := 4 * int64(sn.Dim)
	if err := cw.column(cols, ColValues, rowBytes*cn); err != nil {
		return err
	}
	for s, st := range sn.State {
		if err := cw.floats(st); err != nil {
			return err
		}
		if err := cw.column(cols, ColValues+1+s, rowBytes*cn); err != nil {
			return err
		}
	}
	if tc.Updates {
		for _, u := range sn.Updates {
			cw.scratch = binary.LittleEndian.AppendUint32(cw.scratch, u)
		}
		if cols != nil {
			// The tier keeps a count as 8 bytes, the copy as 4.
			err := readColumn(cols, ColUpdates, 8*cn, func(b []byte) error {
				for j := 0; j+8 <= len(b); j += 8 {
					cw.scratch = binary.LittleEndian.AppendUint32(cw.scratch, uint32(binary.LittleEndian.Uint64(b[j:])))
				}
				return cw.flush(false)
			})
			if err != nil {
				return err
			}
		}
	}
	if tc.Touch {
		for _, x := range sn.LastTouch {
			cw.scratch = binary.LittleEndian.AppendUint64(cw.scratch, uint64(x))
		}
		if err := cw.column(cols, ColTouch, 8*cn); err != nil {
			return err
		}
	}
	if tc.SketchCells > 0 {
		for j, x := range t.extra.Sketch {
			if x != 0 {
				cw.scratch = binary.LittleEndian.AppendUint32(cw.scratch, uint32(j))
				cw.scratch = append(cw.scratch, x)
			}
		}
	} else {
		cw.scratch = append(cw.scratch, t.extra.Sketch...)
	}
	if err := cw.uints(t.accKeys); err != nil {
		return err
	}
	return cw.floats(t.acc)
}

// copyWriter gathers a copy's bytes in scratch and writes them to w a
// piece at a time.
type copyWriter struct {
	w       io.Writer
	scratch []byte
}

func (cw *copyWriter) put(b []byte) error {
	_, err := cw.w.Write(b)
	return err
}

// flush writes what scratch gathered once it passes a piece (or, forced,
// whatever it holds).
func (cw *copyWriter) flush(force bool) error {
	if len(cw.scratch) >= copyPiece || (force && len(cw.scratch) > 0) {
		err := cw.put(cw.scratch)
		cw.scratch = cw.scratch[:0]
		return err
	}
	return nil
}

func (cw *copyWriter) floats(f []float32) error {
	for len(f) > 0 {
		k := min(len(f), copyPiece/4)
		cw.scratch = appendFloats(cw.scratch, f[:k])
		f = f[k:]
		if err := cw.flush(false); err != nil {
			return err
		}
	}
	return nil
}

func (cw *copyWriter) uints(u []uint64) error {
	for len(u) > 0 {
		k := min(len(u), copyPiece/8)
		cw.scratch = appendUints(cw.scratch, u[:k])
		u = u[k:]
		if err := cw.flush(false); err != nil {
			return err
		}
	}
	return nil
}

// column writes the bytes of column col of the rows on disk (size bytes),
// as they lie.
func (cw *copyWriter) column(cols TierColumns, col int, size int64) error {
	if cols == nil {
		return nil
	}
	if err := cw.flush(true); err != nil {
		return err
	}
	return readColumn(cols, col, size, cw.put)
}

// sliceWriter appends what is written to it.
type sliceWriter []byte

func (w *sliceWriter) Write(b []byte) (int, error) {
	*w = append(*w, b...)
	return len(b), nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (w *countWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.n += int64(n)
	return n, err
}

func appendUints(b []byte, u []uint64) []byte {
	for _, x := range u {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

func appendFloats(b []byte, f []float32) []byte {
	for _, x := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// DecodeCopy replaces the shard's state by a copy EncodeCopy made (of
// another copy of this shard): its incarnation too, so that the workers see
// no restart. now is the time: a synchronous step the copy has pending
// starts its timeout (Config's SyncTimeout) anew from it.
func (s *Shard) DecodeCopy(b []byte, now time.Time) error {
	return s.decodeCopy(&copySrc{b: b, size: int64(len(b))}, now)
}

// DecodeCopyFrom is DecodeCopy of the size bytes of r (a file WriteTo
// wrote): a table with a second tier takes its rows a run at a time
// (TierStreamLoader), those past its budget going to its disk, so that a
// copy of a table larger than memory is never held whole.
func (s *Shard) DecodeCopyFrom(r io.ReaderAt, size int64, now time.Time) error {
	return s.decodeCopy(&copySrc{r: r, size: size}, now)
}

// copySrc is a copy's bytes: a slice, or a file read where asked.
type copySrc struct {
	b    []byte      // nil: read r
	r    io.ReaderAt // where b is nil
	size int64
	pos  int64 // what take has taken
}

func (c *copySrc) left() int64 { return c.size - c.pos }

// at is bytes [off, off+n) of the copy: a view of b, or read into buf
// (grown as needed) from r.
func (c *copySrc) at(off int64, n int, buf *[]byte) ([]byte, error) {
	if n < 0 || off < 0 || int64(n) > c.size-off {
		return nil, fmt.Errorf("cut short: %d bytes left, %d wanted", c.size-off, n)
	}
	if c.b != nil {
		return c.b[off : off+int64(n)], nil
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := c.r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading a copy at %d: %w", off, err)
	}
	return b, nil
}

// take is the next n bytes (a view of b, or a fresh slice).
func (c *copySrc) take(n int) ([]byte, error) {
	var buf []byte
	b, err := c.at(c.pos, n, &buf)
	if err != nil {
		return nil, err
	}
	c.pos += int64(n)
	return b, nil
}

// header reads a copy's header, at its start.
func (c *copySrc) header() (copyHeader, error) {
	var h copyHeader
	if c.size < 4 {
		return h, fmt.Errorf("shard: a copy of %d bytes: too short", c.size)
	}
	hlb, err := c.take(4)
	if err != nil {
		return h, fmt.Errorf("shard: a copy: %w", err)
	}
	hl := int64(binary.LittleEndian.Uint32(hlb))
	if hl > c.left() {
		return h, fmt.Errorf("shard: a copy's header of %d bytes in %d", hl, c.left())
	}
	hb, err := c.take(int(hl))
	if err != nil {
		return h, fmt.Errorf("shard: a copy: %w", err)
	}
	if err := json.Unmarshal(hb, &h); err != nil {
		return h, fmt.Errorf("shard: a copy's header: %w", err)
	}
	return h, nil
}

// floats fills dst from the next 4×len(dst) bytes, a piece at a time.
func (c *copySrc) floats(dst []float32) error {
	if c.left() < 4*int64(len(dst)) {
		return fmt.Errorf("shard: a copy cut short: %d bytes left, %d wanted", c.left(), 4*len(dst))
	}
	for len(dst) > 0 {
		k := min(len(dst), copyPiece/4)
		raw, err := c.take(4 * k)
		if err != nil {
			return fmt.Errorf("shard: a copy: %w", err)
		}
		for i := range k {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		dst = dst[k:]
	}
	return nil
}

func (s *Shard) decodeCopy(src *copySrc, now time.Time) error {
	h, err := src.header()
	if err != nil {
		return err
	}
	take := src.floats
	done := map[int]bool{}
	for _, w := range h.Done {
		done[w] = true
	}
	if h.Layout.Vars == nil && h.Layout.Optimizer.Name == "" {
		s.st, s.incarnation, s.done = nil, h.Incarnation, done
		s.epoch++
		s.version++
		return nil
	}
	if len(h.Updates) != len(h.Layout.Vars) {
		return fmt.Errorf("shard: a copy with %d update counts for %d variables", len(h.Updates), len(h.Layout.Vars))
	}
	st, err := Build(h.Layout, func(_ int, dst []float32) error { return take(dst) })
	if err != nil {
		return fmt.Errorf("shard: a copy: %w", err)
	}
	st.setParallel(s.cfg.Parallel)
	for i, v := range st.order {
		v.updates = h.Updates[i]
		for _, slot := range v.state {
			if err := take(slot); err != nil {
				return err
			}
		}
		if v.accum != nil {
			if err := take(v.accum); err != nil {
				return err
			}
		}
	}
	if len(h.Tables) != len(st.tableOrd) {
		return fmt.Errorf("shard: a copy with %d tables' rows for %d tables", len(h.Tables), len(st.tableOrd))
	}
	loader, _ := s.cfg.Tiers.(TierLoader)
	streamer, _ := s.cfg.Tiers.(TierStreamLoader)
	var loaded []*sparse.Table
	unload := func() {
		for _, t := range loaded {
			loader.Unload(t)
		}
	}
	for i, t := range st.tableOrd {
		ld := tableLoad{all: t.t.Import}
		if h.Tables[i].AnyOrder {
			ld.all = t.t.ImportAnyOrder
		}
		if loader != nil {
			ld.all = func(sn sparse.Snapshot) error {
				loaded = append(loaded, t.t)
				if h.Tables[i].AnyOrder {
					return fmt.Errorf("rows in any order for a second tier that takes them in key order only")
				}
				return loader.Load(t.t, sn, len(st.tableOrd))
			}
		}
		if streamer != nil {
			ld.stream = func(rows RowStream) error {
				loaded = append(loaded, t.t)
				return streamer.LoadStream(t.t, rows, len(st.tableOrd))
			}
		}
		if err := decodeTable(t, h.Tables[i], src, ld); err != nil {
			unload()
			return fmt.Errorf("shard: a copy of table %q: %w", t.name, err)
		}
	}
	if src.left() != 0 {
		unload()
		return fmt.Errorf("shard: %d bytes after a copy's tensors", src.left())
	}
	if err := st.tracker.Restore(h.Tracker); err != nil {
		unload()
		return err
	}
	st.layout.Vars = slices.Clone(h.Layout.Vars)
	s.attachTiers(st)
	s.st, s.incarnation, s.done = st, h.Incarnation, done
	s.stampAll()
	s.pendingSince, s.syncFailed, s.failRestart = time.Time{}, nil, false
	if h.Pending {
		s.pendingSince = now
	}
	s.epoch++
	s.version++
	return nil
}

// tableLoad is how a table's rows off a copy are taken: all at once
// (the table's Import, or a TierLoader's Load), or, where the table has a
// TierStreamLoader and the rows are in any order, as a stream.
type tableLoad struct {
	all    func(sparse.Snapshot) error
	stream func(RowStream) error // nil: none
}

// decodeSketch takes a table's admission counters off a copy with take:
// every counter, or only the cells that are not zero (at, value).
func decodeSketch(h tableCopy, take func(int) ([]byte, error)) ([]uint8, error) {
	switch {
	case h.Sketch < 0 || h.SketchCells < 0:
		return nil, fmt.Errorf("%d admission counters, %d sent", h.Sketch, h.SketchCells)
	case h.SketchCells > 0:
		raw, err := take(5 * h.SketchCells)
		if err != nil {
			return nil, err
		}
		sketch := make([]uint8, h.Sketch)
		for j := range h.SketchCells {
			at := int(binary.LittleEndian.Uint32(raw[5*j:]))
			if at >= len(sketch) {
				return nil, fmt.Errorf("admission counter %d of %d", at, len(sketch))
			}
			sketch[at] = raw[5*j+4]
		}
		return sketch, nil
	case h.Sketch > 0:
		raw, err := take(h.Sketch)
		if err != nil {
			return nil, err
		}
		return slices.Clone(raw), nil
	}
	return nil, nil
}

// decodeTable fills an empty table from its part of a copy, taken off
// src; ld takes the rows.
func decodeTable(t *table, h tableCopy, src *copySrc, ld tableLoad) error {
	dim := t.t.Dim()
	slots := t.rule.StateSlots()
	take := func(n int) ([]byte, error) { return src.take(n) }
	floats := func(n int) ([]float32, error) {
		raw, err := take(4 * n)
		if err != nil {
			return nil, err
		}
		f := make([]float32, n)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return f, nil
	}
	uints := func(n int) ([]uint64, error) {
		raw, err := take(8 * n)
		if err != nil {
			return nil, err
		}
		u := make([]uint64, n)
		for i := range u {
			u[i] = binary.LittleEndian.Uint64(raw[8*i:])
		}
		return u, nil
	}
	if h.Rows < 0 || int64(h.Rows) > src.left()/8 || h.Acc < 0 || int64(h.Acc) > src.left()/8 {
		return fmt.Errorf("%d rows and %d accumulated keys in %d bytes", h.Rows, h.Acc, src.left())
	}
	var sn sparse.Snapshot
	var rows *copyRows
	if h.AnyOrder && ld.stream != nil {
		// The rows stay where they lie; the tier reads them a run at a
		// time once the rest of the table's part is read.
		rows = &copyRows{src: src, n: h.Rows, dim: dim, slots: slots, updates: h.Updates, touch: h.Touch, keys: src.pos}
		size := int64(h.Rows) * (8 + 4*int64(dim)*int64(1+slots))
		if h.Updates {
			size += 4 * int64(h.Rows)
		}
		if h.Touch {
			size += 8 * int64(h.Rows)
		}
		if size > src.left() {
			return fmt.Errorf("cut short: %d bytes left, %d rows of %d bytes wanted", src.left(), h.Rows, size)
		}
		src.pos += size
	} else {
		var err error
		if sn, err = decodeRows(h, dim, slots, take, floats, uints); err != nil {
			return err
		}
	}
	e := sparse.Extra{Clock: h.Clock, Base: h.Base, Stats: h.Stats}
	var err error
	if e.Sketch, err = decodeSketch(h, take); err != nil {
		return err
	}
	accKeys, err := uints(h.Acc)
	if err != nil {
		return err
	}
	acc, err := floats(h.Acc * dim)
	if err != nil {
		return err
	}
	if rows != nil {
		err = ld.stream(rows)
	} else {
		err = ld.all(sn)
	}
	if err != nil {
		return err
	}
	if err := t.t.SetExtra(e); err != nil {
		return err
	}
	t.loseBound()
	if h.Acc > 0 {
		if t.accPos == nil {
			return fmt.Errorf("%d accumulated keys for an asynchronous table", h.Acc)
		}
		for i, k := range accKeys {
			t.accPos[k] = i
		}
		t.accKeys, t.acc = accKeys, acc
	}
	return nil
}

// decodeRows reads a table's rows off a copy whole.
func decodeRows(h tableCopy, dim, slots int, take func(int) ([]byte, error), floats func(int) ([]float32, error), uints func(int) ([]uint64, error)) (sparse.Snapshot, error) {
	sn := sparse.Snapshot{Dim: dim, State: make([][]float32, slots)}
	var err error
	if sn.Keys, err = uints(h.Rows); err != nil {
		return sn, err
	}
	if sn.Values, err = floats(h.Rows * dim); err != nil {
		return sn, err
	}
	for i := range sn.State {
		if sn.State[i], err = floats(h.Rows * dim); err != nil {
			return sn, err
		}
	}
	if h.Updates {
		raw, err := take(4 * h.Rows)
		if err != nil {
			return sn, err
		}
		sn.Updates = make([]uint32, h.Rows)
		for i := range sn.Updates {
			sn.Updates[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
	}
	if h.Touch {
		u, err := uints(h.Rows)
		if err != nil {
			return sn, err
		}
		sn.LastTouch = make([]int64, h.Rows)
		for i, x := range u {
			sn.LastTouch[i] = int64(x)
		}
	}
	return sn, nil
}

// copyRows is a RowStream over a table's rows in a copy, read where they
// lie a run at a time: the keys' column at keys, then the values', each
// slot's, the update counts' and the last touches'.
type copyRows struct {
	src            *copySrc
	n, dim, slots  int
	updates, touch bool
	keys           int64
	buf            []byte
}

func (r *copyRows) Len() int { return r.n }

// col is the offset of row i of column c (0 keys, 1 values, 1+s slot s,
// then updates and touches) and its bytes a row.
func (r *copyRows) col(c, i int) (int64, int) {
	n, fl := int64(r.n), 4*int64(r.dim)
	off := r.keys
	if c == 0 {
		return off + 8*int64(i), 8
	}
	off += 8 * n
	if c <= 1+r.slots {
		return off + fl*n*int64(c-1) + fl*int64(i), int(fl)
	}
	off += fl * n * int64(1+r.slots)
	if r.updates {
		if c == 2+r.slots {
			return off + 4*int64(i), 4
		}
		off += 4 * n
	}
	return off + 8*int64(i), 8
}

// read is rows [i, i+m) of column c.
func (r *copyRows) read(c, i, m int) ([]byte, error) {
	off, w := r.col(c, i)
	return r.src.at(off, w*m, &r.buf)
}

func (r *copyRows) Touches(f func(touch []int64)) bool {
	if !r.touch {
		return false
	}
	run := copyPiece / 8
	t := make([]int64, 0, min(run, r.n))
	for i := 0; i < r.n; i += run {
		m := min(run, r.n-i)
		b, err := r.read(3+r.slots, i, m)
		if err != nil {
			return true // Rows reads the same bytes, and reports it
		}
		t = t[:m]
		for j := range t {
			t[j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
		}
		f(t)
	}
	return true
}

func (r *copyRows) Rows(n int, f func(run sparse.Snapshot) error) error {
	n = max(n, 1)
	d := r.dim
	s := sparse.NewSnapshot(d, r.slots, min(n, r.n), r.updates, r.touch)
	for i := 0; i < r.n; i += n {
		m := min(n, r.n-i)
		b, err := r.read(0, i, m)
		if err != nil {
			return err
		}
		s.Keys = s.Keys[:m]
		for j := range s.Keys {
			s.Keys[j] = binary.LittleEndian.Uint64(b[8*j:])
		}
		for c := range 1 + r.slots {
			dst := &s.Values
			if c > 0 {
				dst = &s.State[c-1]
			}
			if b, err = r.read(1+c, i, m); err != nil {
				return err
			}
			*dst = (*dst)[:m*d]
			for j := range *dst {
				(*dst)[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
		}
		if r.updates {
			if b, err = r.read(2+r.slots, i, m); err != nil {
				return err
			}
			s.Updates = s.Updates[:m]
			for j := range s.Updates {
				s.Updates[j] = binary.LittleEndian.Uint32(b[4*j:])
			}
		}
		if r.touch {
			if b, err = r.read(3+r.slots, i, m); err != nil {
				return err
			}
			s.LastTouch = s.LastTouch[:m]
			for j := range s.LastTouch {
				s.LastTouch[j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
			}
		}
		if err := f(s); err != nil {
			return err
		}
	}
	return nil
}
