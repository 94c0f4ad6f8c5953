package sparse

import (
	"fmt"
	"math"
)

// Replication (docs/REPLICATION.md): every copy of a replicated shard
// applies the same calls in the same order, so its tables hold the same
// rows, optimizer state and admission counts. A Pull is not read-only: it
// counts keys for admission and creates rows. A replicated shard therefore
// logs the pulls that would change its tables (PullChanges) and applies
// them as Pull does on every copy, and answers pulls with Peek, which
// changes nothing. Rows that exist read the same either way, and a key
// without a row reads as its initial value (a pure function of the key).

// Peek writes the value of each key to out as Pull does, but changes
// nothing: a key with no row reads as its initial value, is not counted
// for admission, and gets no row. len(out) must be len(keys)*Dim.
func (t *Table) Peek(keys []uint64, out []float32) error {
	d := t.dim
	if len(out) != len(keys)*d {
		return fmt.Errorf("%w: Peek of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(keys), d, len(keys)*d, len(out))
	}
	for i, k := range keys {
		dst := out[i*d : (i+1)*d : (i+1)*d]
		r := t.lookup(k, hashKey(k))
		if r < 0 {
			t.init.Init(k, dst)
			continue
		}
		p := &t.pages[r>>t.pageShift]
		o := (r & t.pageMask) * t.stride
		copy(dst, p.data[o:o+d])
	}
	return nil
}

// PullChanges reports whether a Pull of keys would change the table: some
// key has no row (it would be counted for admission, or get one).
func (t *Table) PullChanges(keys []uint64) bool {
	for _, k := range keys {
		if t.lookup(k, hashKey(k)) < 0 {
			return true
		}
	}
	return false
}

// Extra is what a table holds besides its rows (Export) that a copy of it
// needs to behave bit for bit as the original: the admission counts, the
// latest step seen (it stamps the rows Pull creates), the base of the
// stored touch steps, and the counters of Stats.
type Extra struct {
	Clock, Base int64
	Sketch      []uint8 // nil when MinCount <= 1
	Stats       Stats
}

// Extra returns t's extra state (the sketch is copied).
func (t *Table) Extra() Extra {
	e := Extra{Clock: t.clock, Base: t.base, Stats: t.stats}
	if t.sketch != nil {
		e.Sketch = append([]uint8(nil), t.sketch.cells...)
	}
	return e
}

// SetExtra gives t, just filled by Import of another table's Export, that
// table's extra state.
func (t *Table) SetExtra(e Extra) error {
	switch {
	case t.sketch == nil && e.Sketch != nil:
		return fmt.Errorf("%w: admission counts for a table that counts none", ErrSnapshot)
	case t.sketch != nil && len(e.Sketch) != len(t.sketch.cells):
		return fmt.Errorf("%w: %d admission counters, the table has %d", ErrSnapshot, len(e.Sketch), len(t.sketch.cells))
	}
	if t.sketch != nil {
		copy(t.sketch.cells, e.Sketch)
	}
	if t.live > 0 && e.Base != t.base && t.keepTouch {
		// Touch steps are stored relative to base: move them.
		d := t.base - e.Base
		t.forLive(func(_ int, p *page, o int) {
			if tc := p.touch[o]; tc != math.MaxUint32 {
				p.touch[o] = uint32(min(max(int64(tc)+d, 0), math.MaxUint32))
			}
		})
	}
	t.clock, t.base, t.stats = e.Clock, e.Base, e.Stats
	return nil
}
