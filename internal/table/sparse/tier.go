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
// Stats.Evicted, no deleted key for a delta checkpoint). Take says which
// rows it took had changed since the last ResetChanges or FrozenChanges:
// the caller keeps that while it holds them (a delta checkpoint needs
// them) and hands it back to Put. EvictedBefore tells the caller which of
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
// row are skipped, a repeated key is taken once. changed[i] reports
// whether row i was created or changed since the last ResetChanges or
// FrozenChanges (its dirty bit; all false while change tracking is off).
func (t *Table) Take(keys []uint64) (s Snapshot, changed []bool) {
	n, d := len(keys), t.dim
	s = NewSnapshot(d, t.slots, n, t.keepCount, t.keepTouch)
	changed = make([]bool, 0, n)
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	t.bump()
	for _, k := range sorted {
		r, pos := t.find(k, hashKey(k))
		if r < 0 {
			continue
		}
		p := &t.pages[r>>t.pageShift]
		o := r & t.pageMask
		row := p.data[o*t.stride : (o+1)*t.stride]
		s.Keys = append(s.Keys, k)
		changed = append(changed, t.tracking && p.dirty[o>>6]&(1<<(o&63)) != 0)
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
	return s, changed
}

// Put stores the rows of s, which Take returned (its keys ascending and
// without rows here), bypassing admission, with their update counts and
// last-touched steps exactly: where a step is older than the table's base
// (see Evict), every row's stored step is moved to make room. changed[i]
// says whether row i counts as changed since the last ResetChanges or
// FrozenChanges (what Take said of it; nil: every row does). Rows already
// here are left as they are. It fails like Import on a Snapshot of the
// wrong shape or past MaxRows.
func (t *Table) Put(s Snapshot, changed []bool) error {
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
		if changed != nil && !changed[i] {
			t.pages[r>>t.pageShift].dirty[(r&t.pageMask)>>6] &^= 1 << (r & t.pageMask & 63)
		}
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

// ColdHand is where ColdestFrom goes on scanning a table's rows, kept by
// the caller between calls: CLOCK's hand.
type ColdHand struct {
	pos int    // the row slot the next scan starts at
	rng uint64 // the sample's random state
}

// ColdestFrom appends to dst up to n keys of rows touched long ago,
// without reading every row as Coldest does: it estimates, from a sample
// of rows, the last touch below which about a fraction f of the rows lie,
// and takes the rows at or below it that a scan from h meets, going round
// the table from where the previous call stopped.
//
// f is 2n/live, at least, so that the scan reads about half the rows;
// while n is under 1% of the rows it may grow to 64n/live, up to 1%, so
// that the scan reads about 1/64 of them: in a large table the rows taken
// are then among its coldest 1%, not its coldest n. When the scan meets
// fewer than n such rows in a whole turn, it takes any rows.
func (t *Table) ColdestFrom(h *ColdHand, n int, dst []uint64) []uint64 {
	if n <= 0 || t.live == 0 || !t.keepTouch {
		return dst
	}
	if n >= t.live {
		t.forLive(func(_ int, p *page, o int) { dst = append(dst, p.keys[o]) })
		return dst
	}
	slots := t.highWater
	isLive := func(r int) (*page, int, bool) {
		p := &t.pages[r>>t.pageShift]
		o := r & t.pageMask
		return p, o, p.live[o>>6]&(1<<(o&63)) != 0
	}
	const samples = 1 << 10
	sample := make([]uint32, 0, samples)
	for try := 0; try < 16*samples && len(sample) < samples; try++ {
		h.rng = h.rng*6364136223846793005 + 1442695040888963407 // a 64-bit LCG's step
		if p, o, ok := isLive(int((h.rng >> 32) * uint64(slots) >> 32)); ok {
			sample = append(sample, p.touch[o])
		}
	}
	if len(sample) == 0 {
		return t.Coldest(n, dst)
	}
	slices.Sort(sample)
	if h.pos >= slots {
		h.pos = 0
	}
	f := max(2*float64(n), min(64*float64(n), float64(t.live)/100)) / float64(t.live)
	thr := sample[min(len(sample)-1, int(f*float64(len(sample))))]
	start := len(dst)
	for pass := 0; pass < 2 && len(dst)-start < n; pass++ {
		for seen := 0; seen < slots && len(dst)-start < n; seen++ {
			r := h.pos
			if h.pos++; h.pos >= slots {
				h.pos = 0
			}
			p, o, ok := isLive(r)
			if !ok {
				continue
			}
			// The second pass takes the rows the first left.
			if tc := p.touch[o]; tc <= thr == (pass == 0) {
				dst = append(dst, p.keys[o])
			}
		}
	}
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

// smallPageShift is the page size SmallPages sets: 1024 rows.
const smallPageShift = 10

// SmallPages makes an empty table keep its rows in pages of 1024 rows
// rather than of about 4 MiB (see maxPageShift). A table under a disk tier
// holds its share of a memory budget, and a table's last page is partly
// empty: with large pages and many tables (deep_ctr has one a field), the
// pages held a third more memory than their rows. A table that holds rows
// already is left as it is.
func (t *Table) SmallPages() {
	if t.highWater > 0 || len(t.pages) > 0 || t.pageShift <= smallPageShift {
		return
	}
	t.pageShift, t.pageMask = smallPageShift, 1<<smallPageShift-1
}

// KeepsCount reports whether rows carry an update count (the rule reads
// its step argument): a Snapshot of the table has Updates.
func (t *Table) KeepsCount() bool { return t.keepCount }

// Clock is the latest global step the table has seen (by Push or Evict).
func (t *Table) Clock() int64 { return t.clock }
