package shard

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
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
	h := c.h
	if c.empty {
		hb, _ := json.Marshal(h)
		return binary.LittleEndian.AppendUint32(nil, uint32(len(hb))), nil
	}
	n := 0
	for _, d := range c.dense {
		n += len(d)
	}
	snaps := make([]sparse.Snapshot, len(c.tables))
	for i := range c.tables {
		t := &c.tables[i]
		snaps[i] = t.t.Export()
		e := &t.extra
		if t.cold != nil {
			all, err := t.cold.Merge(snaps[i])
			if err != nil {
				return nil, fmt.Errorf("shard: a copy of table %q: %w", t.name, err)
			}
			snaps[i] = all
			// The tier's rows may be older than the table's own: the
			// copy's steps are stored from the oldest.
			if len(all.LastTouch) > 0 {
				e.Base = min(e.Base, slices.Min(all.LastTouch))
			}
		}
		sn := snaps[i]
		tc := tableCopy{
			Rows: len(sn.Keys), Updates: sn.Updates != nil, Touch: sn.LastTouch != nil,
			Clock: e.Clock, Base: e.Base, Sketch: len(e.Sketch), Stats: e.Stats, Acc: len(t.accKeys),
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
		n += 3*len(sn.Keys) + len(sn.Values)*(1+len(sn.State)) + len(e.Sketch)/4 + 3*len(t.accKeys) + len(t.acc)
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 4+len(hb)+4*n+64)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	for _, d := range c.dense {
		out = appendFloats(out, d)
	}
	for i, t := range c.tables {
		sn := snaps[i]
		out = appendUints(out, sn.Keys)
		out = appendFloats(out, sn.Values)
		for _, st := range sn.State {
			out = appendFloats(out, st)
		}
		for _, u := range sn.Updates {
			out = binary.LittleEndian.AppendUint32(out, u)
		}
		for _, tc := range sn.LastTouch {
			out = binary.LittleEndian.AppendUint64(out, uint64(tc))
		}
		if h.Tables[i].SketchCells > 0 {
			for j, x := range t.extra.Sketch {
				if x != 0 {
					out = binary.LittleEndian.AppendUint32(out, uint32(j))
					out = append(out, x)
				}
			}
		} else {
			out = append(out, t.extra.Sketch...)
		}
		out = appendUints(out, t.accKeys)
		out = appendFloats(out, t.acc)
	}
	return out, nil
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
	if len(b) < 4 {
		return fmt.Errorf("shard: a copy of %d bytes: too short", len(b))
	}
	hl := int(binary.LittleEndian.Uint32(b))
	if hl > len(b)-4 {
		return fmt.Errorf("shard: a copy's header of %d bytes in %d", hl, len(b)-4)
	}
	var h copyHeader
	if err := json.Unmarshal(b[4:4+hl], &h); err != nil {
		return fmt.Errorf("shard: a copy's header: %w", err)
	}
	rest := b[4+hl:]
	take := func(dst []float32) error {
		if len(rest) < 4*len(dst) {
			return fmt.Errorf("shard: a copy cut short: %d bytes left, %d wanted", len(rest), 4*len(dst))
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
		}
		rest = rest[4*len(dst):]
		return nil
	}
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
	var loaded []*sparse.Table
	unload := func() {
		for _, t := range loaded {
			loader.Unload(t)
		}
	}
	for i, t := range st.tableOrd {
		load := t.t.Import
		if loader != nil {
			load = func(sn sparse.Snapshot) error {
				loaded = append(loaded, t.t)
				return loader.Load(t.t, sn, len(st.tableOrd))
			}
		}
		if err := decodeTable(t, h.Tables[i], &rest, load); err != nil {
			unload()
			return fmt.Errorf("shard: a copy of table %q: %w", t.name, err)
		}
	}
	if len(rest) != 0 {
		unload()
		return fmt.Errorf("shard: %d bytes after a copy's tensors", len(rest))
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
// rest; load takes the rows: the table's Import, or a second tier's
// TierLoader.
func decodeTable(t *table, h tableCopy, rest *[]byte, load func(sparse.Snapshot) error) error {
	b := *rest
	dim := t.t.Dim()
	slots := t.rule.StateSlots()
	take := func(n int) ([]byte, error) {
		if n < 0 || n > len(b) {
			return nil, fmt.Errorf("cut short: %d bytes left, %d wanted", len(b), n)
		}
		out := b[:n]
		b = b[n:]
		return out, nil
	}
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
	if h.Rows < 0 || h.Rows > len(b)/8 || h.Acc < 0 || h.Acc > len(b)/8 {
		return fmt.Errorf("%d rows and %d accumulated keys in %d bytes", h.Rows, h.Acc, len(b))
	}
	sn := sparse.Snapshot{Dim: dim, State: make([][]float32, slots)}
	var err error
	if sn.Keys, err = uints(h.Rows); err != nil {
		return err
	}
	if sn.Values, err = floats(h.Rows * dim); err != nil {
		return err
	}
	for i := range sn.State {
		if sn.State[i], err = floats(h.Rows * dim); err != nil {
			return err
		}
	}
	if h.Updates {
		raw, err := take(4 * h.Rows)
		if err != nil {
			return err
		}
		sn.Updates = make([]uint32, h.Rows)
		for i := range sn.Updates {
			sn.Updates[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
	}
	if h.Touch {
		u, err := uints(h.Rows)
		if err != nil {
			return err
		}
		sn.LastTouch = make([]int64, h.Rows)
		for i, x := range u {
			sn.LastTouch[i] = int64(x)
		}
	}
	e := sparse.Extra{Clock: h.Clock, Base: h.Base, Stats: h.Stats}
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
	if err := load(sn); err != nil {
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
	*rest = b
	return nil
}
