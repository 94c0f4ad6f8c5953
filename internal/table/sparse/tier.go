package sparse

import (
	"math"
	"slices"
)

// Tiers. A table can be the memory tier of a larger one whose other rows
// live elsewhere (internal/table/tier keeps them on disk): the caller moves
// rows out with Take and back with Put, before the table reads or writes
// them, and the table's results are then the same, bit for bit, as if every
// row had stayed. A moved row keeps its value, state, update count and
// last-touched step; a row Take removes is neither evicted nor deleted (no
// Stats.Evicted, no deleted key for a delta checkpoint: the next delta
// cannot be known, see ChangesKnown). EvictedBefore tells the caller which of
// the rows it holds Evict would have dropped.

// Missing appends to dst the keys (of keys, in order) that have no row.
func (t *Table) Missing(keys, dst []uint64) []uint64 {
	for _, k := range keys {
		if t.lookup(k, hashKey(k)) < 0 {
			dst = append(dst, k)
		}
	}
	return dst
}

// Has reports whether key has a row.
func (t *Table) Has(key uint64) bool {
	return t.lookup(key, hashKey(key)) >= 0
}

// EvictedBefore is the step before which a row's last touch makes it
// evicted: the largest cutoff Evict or EvictBefore has applied (0 if none).
// A row held outside the table whose last touch is older was dropped, as
// far as the table's results go.
func (t *Table) EvictedBefore() int64 { return t.cutoff }

// KeepsTouch reports whether rows carry their last-touched step
// (Config.EvictAfterSteps > 0 or Config.KeepTouch).
func (t *Table) KeepsTouch() bool { return t.keepTouch }

// Take removes the rows of keys and returns them, in ascending key order,
// with their state, update counts and last-touched steps; keys without a
// row are skipped, a repeated key is taken once. Once it takes a row, the
// changes since the last ResetChanges are not known (ChangesKnown).
func (t *Table) Take(keys []uint64) Snapshot {
	n, d := len(keys), t.dim
	s := Snapshot{Dim: d, Keys: make([]uint64, 0, n), Values: make([]float32, 0, n*d), State: make([][]float32, t.slots)}
	for i := range s.State {
		s.State[i] = make([]float32, 0, n*d)
	}
	if t.keepCount {
		s.Updates = make([]uint32, 0, n)
	}
	if t.keepTouch {
		s.LastTouch = make([]int64, 0, n)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	t.bump()
	if t.tracking && len(sorted) > 0 {
		// A moved row's change, or its eviction where it went, is no
		// longer the table's to cut: the next delta must be full.
		t.changesLost, t.deleted = true, nil
	}
	for _, k := range sorted {
		r, pos := t.find(k, hashKey(k))
		if r < 0 {
			continue
		}
		p := &t.pages[r>>t.pageShift]
		o := r & t.pageMask
		row := p.data[o*t.stride : (o+1)*t.stride]
		s.Keys = append(s.Keys, k)
		s.Values = append(s.Values, row[:d]...)
		for j := range s.State {
			s.State[j] = append(s.State[j], row[(j+1)*d:(j+2)*d]...)
		}
		if s.Updates != nil {
			s.Updates = append(s.Updates, p.count[o])
		}
		if s.LastTouch != nil {
			s.LastTouch = append(s.LastTouch, t.base+int64(p.touch[o]))
		}
		t.deleteSlot(pos)
		tracking := t.tracking
		t.tracking = false // not a deletion
		t.freeRow(r)
		t.tracking = tracking
	}
	return s
}

// Put stores the rows of s, which Take returned (its keys ascending and
// without rows here), bypassing admission, with their update counts and
// last-touched steps exactly: where a step is older than the table's base
// (see Evict), every row's stored step is moved to make room. Rows already
// here are left as they are. It fails like Import on a Snapshot of the
// wrong shape or past MaxRows.
func (t *Table) Put(s Snapshot) error {
	if err := t.checkSnapshot(s); err != nil {
		return err
	}
	n := len(s.Keys)
	if n == 0 {
		return nil
	}
	if n > t.maxRows-t.live {
		return ErrFull
	}
	if s.LastTouch != nil && t.keepTouch {
		lo := slices.Min(s.LastTouch)
		if t.live == 0 {
			t.base = lo
		} else if lo < t.base {
			t.rebase(lo)
		}
	}
	if t.live+n > t.maxLive {
		t.grow(t.live + n)
	}
	for i, k := range s.Keys {
		h := hashKey(k)
		r, pos := t.find(k, h)
		if r >= 0 {
			continue
		}
		r = t.allocRow(k)
		t.index[pos] = uint32(h)&^t.rowMask | uint32(r+1)
		t.fillRow(s, i, r)
	}
	return nil
}

// rebase lowers base to step, keeping every row's last-touched step.
func (t *Table) rebase(step int64) {
	shift := t.base - step
	for pi := range t.pages {
		t.own(pi)
		p := &t.pages[pi]
		for o, tc := range p.touch {
			if tc != math.MaxUint32 {
				p.touch[o] = uint32(min(int64(tc)+shift, math.MaxUint32))
			}
		}
	}
	t.base = step
}

// Coldest appends to dst up to n keys of the rows touched least recently
// (by last-touched step; the table must keep it, see KeepsTouch), found
// from a sample of the rows: close to, not exactly, the n oldest.
func (t *Table) Coldest(n int, dst []uint64) []uint64 {
	if n <= 0 || t.live == 0 || !t.keepTouch {
		return dst
	}
	if n >= t.live {
		t.forLive(func(_ int, p *page, o int) { dst = append(dst, p.keys[o]) })
		return dst
	}
	// The threshold: the touch at rank n/live of a sample.
	const samples = 1 << 12
	every := max(1, t.live/samples)
	var sample []uint32
	i := 0
	t.forLive(func(_ int, p *page, o int) {
		if i%every == 0 {
			sample = append(sample, p.touch[o])
		}
		i++
	})
	slices.Sort(sample)
	thr := sample[min(len(sample)-1, int(int64(n)*int64(len(sample))/int64(t.live)))]
	start := len(dst)
	t.forLive(func(_ int, p *page, o int) {
		if len(dst)-start < n && p.touch[o] < thr {
			dst = append(dst, p.keys[o])
		}
	})
	t.forLive(func(_ int, p *page, o int) {
		if len(dst)-start < n && p.touch[o] == thr {
			dst = append(dst, p.keys[o])
		}
	})
	return dst
}

// checkSnapshot checks s's shape against the table's.
func (t *Table) checkSnapshot(s Snapshot) error {
	n, d := len(s.Keys), t.dim
	switch {
	case s.Dim != d, len(s.Values) != n*d, len(s.State) != t.slots,
		s.Updates != nil && len(s.Updates) != n, s.LastTouch != nil && len(s.LastTouch) != n:
		return ErrSnapshot
	}
	for _, st := range s.State {
		if len(st) != n*d {
			return ErrSnapshot
		}
	}
	return nil
}

// KeepTouch makes the table store each row's last-touched step from now
// on, as Config.KeepTouch does: rows held now are stamped with the latest
// step seen. Values and pulls are unchanged.
func (t *Table) KeepTouch() {
	if t.keepTouch {
		return
	}
	t.keepTouch = true
	t.base = t.clock
	for i := range t.pages {
		t.pages[i].touch = make([]uint32, len(t.pages[i].keys))
	}
}

// KeepsCount reports whether rows carry an update count (the rule reads
// its step argument): a Snapshot of the table has Updates.
func (t *Table) KeepsCount() bool { return t.keepCount }

// Clock is the latest global step the table has seen (by Push or Evict).
func (t *Table) Clock() int64 { return t.clock }
