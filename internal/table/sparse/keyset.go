package sparse

import (
	"fmt"
	"math"
	"slices"

	"github.com/paramserv/paramserv/internal/optim"
)

// A KeySet is a list of keys together with the row ids they had in one
// table when last used, so that a key set used again skips the index
// (ps-lite's key caching: a worker that touches the same keys step after
// step sends them once and names them by a cache id afterwards; the server
// keeps their KeySet). PushSet, PullSet and PushPullSet are Push, Pull and
// a Push then a Pull over its keys, with the same results and statistics;
// they only find the rows faster.
//
// The remembered row ids stay valid while the table's Gen is unchanged; a
// KeySet notices a different table or Gen by itself and looks the keys up
// again. Rows that did not exist (a key not admitted yet) are looked up
// again on every use, exactly as Push and Pull would.
//
// A KeySet is not safe for concurrent use, and belongs to the goroutine
// that owns the table.
type KeySet struct {
	keys []uint64
	rows []int32 // row of keys[i], or -1; valid for (table, gen)
	// table and gen are what rows were found in; a nil table means none.
	table *Table
	gen   uint64
	// distinct: no two resolved rows are the same (checked when rows
	// change), so the batched update may gather and scatter them.
	distinct bool
	// full: every key has a row (no -1 in rows), so resolve has nothing
	// to look up and skips its pass over them.
	full bool
}

// NewKeySet returns a KeySet of keys. It keeps keys (it does not copy).
func NewKeySet(keys []uint64) *KeySet {
	ks := &KeySet{}
	ks.Reset(keys)
	return ks
}

// Reset makes ks a set of keys (kept, not copied), forgetting every row,
// and reuses its memory.
func (ks *KeySet) Reset(keys []uint64) {
	ks.keys = keys
	ks.table = nil
}

// Keys returns the keys of ks.
func (ks *KeySet) Keys() []uint64 { return ks.keys }

// Len is the number of keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// Gen changes whenever a row of the table may have been given to another
// key (Evict frees rows; the next new keys reuse them). Row ids found while
// Gen stays the same keep naming the same keys.
func (t *Table) Gen() uint64 { return t.gen }

// setRows makes ks's rows valid for t: if they were found in another table
// or an older generation, every row is forgotten.
func (ks *KeySet) setRows(t *Table) {
	if ks.table == t && ks.gen == t.gen && len(ks.rows) == len(ks.keys) {
		return
	}
	if cap(ks.rows) < len(ks.keys) {
		ks.rows = make([]int32, len(ks.keys))
	}
	ks.rows = ks.rows[:len(ks.keys)]
	for i := range ks.rows {
		ks.rows[i] = -1
	}
	ks.table, ks.gen, ks.distinct, ks.full = t, t.gen, true, false
}

// resolve finds or creates the rows of the keys that have none, as
// acquire does for Push (pull false) or Pull (pull true), counting the keys
// that stay without a row. It returns whether any key has no row.
func (t *Table) resolve(ks *KeySet, pull bool) (missing bool) {
	if ks.full {
		return false
	}
	found := false
	// A new key set: look ahead as Push does. One used before, whose
	// keys mostly have rows: hash only the keys without.
	var la lookahead
	ahead := len(ks.rows) > 0 && ks.rows[0] < 0
	if ahead {
		la.start(t, ks.keys)
	}
	for i, r := range ks.rows {
		var h uint64
		if ahead {
			h = la.at(t, i)
		}
		if r >= 0 {
			continue
		}
		if !ahead {
			h = hashKey(ks.keys[i])
		}
		r := t.acquire(ks.keys[i], h, t.clock)
		if r < 0 {
			if pull {
				t.stats.RejectedPulls++
			} else {
				t.stats.RejectedPushes++
			}
			missing = true
			continue
		}
		ks.rows[i] = int32(r)
		found = true
	}
	if found {
		ks.distinct = t.distinctRows(ks.rows)
	}
	ks.full = !missing
	return missing
}

// distinctRows reports whether no row id repeats in rows (ignoring -1),
// with a bitmap of the rows ever allocated.
func (t *Table) distinctRows(rows []int32) bool {
	words := (t.highWater + 63) / 64
	if cap(t.mark) < words {
		t.mark = make([]uint64, words+words/4)
	}
	mark := t.mark[:words]
	distinct := true
	for _, r := range rows {
		if r < 0 {
			continue
		}
		w, b := r>>6, uint64(1)<<(r&63)
		if mark[w]&b != 0 {
			distinct = false
			break
		}
		mark[w] |= b
	}
	for _, r := range rows {
		if r >= 0 {
			mark[r>>6] = 0
		}
	}
	return distinct
}

// ResolveSet looks up the rows of ks's keys now, creating those not there
// yet exactly as PullSet would, so that a PullSet or PushSet of ks that
// follows (while Gen stays the same) finds every row without a lookup. A
// caller may resolve the key set of a later batch while it waits for an
// earlier one's push: a new row starts at its initial value whenever it is
// made, so the results are the same, provided no lookup can be refused or
// stamped (no MinCount above 1, no eviction, no row cap reached), since a
// refusal would be counted again when the key set is used.
func (t *Table) ResolveSet(ks *KeySet) {
	ks.setRows(t)
	t.resolve(ks, true)
}

// PushSet is Push(ks.Keys(), grads, step).
func (t *Table) PushSet(ks *KeySet, grads []float32, step int64) error {
	d := t.dim
	if len(grads) != len(ks.keys)*d {
		return fmt.Errorf("%w: Push of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(ks.keys), d, len(ks.keys)*d, len(grads))
	}
	t.clock = max(t.clock, step)
	t.bump()
	ks.setRows(t)
	missing := t.resolve(ks, false)
	t.ownRows(ks.rows)
	touch := t.rel(t.clock)
	if ks.distinct && optim.PerCoordinate(t.rule) {
		if t.keepCount {
			t.pushCounted(ks.rows, grads, touch)
		} else {
			t.pushBatched(ks.rows, grads, missing, touch)
		}
		return nil
	}
	for i, r := range ks.rows {
		if r >= 0 {
			t.updateRow(int(r), grads[i*d:(i+1)*d:(i+1)*d], touch)
		}
	}
	return nil
}

// updateRow applies one row's gradient with the rule and stamps its last
// touch, as Push does.
func (t *Table) updateRow(r int, g []float32, touch uint32) {
	d := t.dim
	t.own(r >> t.pageShift)
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
	for s := range t.views {
		t.views[s] = row[(s+1)*d : (s+2)*d : (s+2)*d]
	}
	n := int64(1)
	if p.count != nil {
		c := p.count[o]
		if c < math.MaxUint32 {
			c++
			p.count[o] = c
		}
		n = int64(c)
	}
	var old []float32
	if p.ver != nil {
		old = append(t.oldVal[:0], row[:d]...)
		t.oldVal = old
	}
	t.rule.Update(row[:d:d], g, t.views, n)
	if p.touch != nil {
		p.touch[o] = touch
	}
	p.dirty[o>>6] |= 1 << (o & 63)
	if p.ver != nil && !sameBits(old, row[:d]) {
		p.ver[o] = t.mod
	}
}

// batchRows is how many values pushBatched updates with one Update call.
const batchRows = 1024

// pushBatched updates distinct rows by gathering up to batchRows values
// (each row's value and state) into contiguous scratch, running the rule
// once over the batch, and scattering the results back, stamping each
// row's last touch with touch. The rules are per coordinate and, with no
// update count kept, every row is updated with step 1, so the result is bit
// for bit that of one Update per row. Rows of -1 are skipped, their
// gradients left out of the batch. A batch whose rows are consecutive in
// one page (keys first seen together got consecutive rows) is updated in
// place when the rule keeps no state.
func (t *Table) pushBatched(rows []int32, grads []float32, missing bool, touch uint32) {
	d, slots, stride := t.dim, t.slots, t.stride
	per, val, gb, state := t.batchScratch()
	for lo := 0; lo < len(rows); lo += per {
		hi := min(lo+per, len(rows))
		if p, o, ok := t.run(rows[lo:hi]); ok {
			if slots == 0 {
				t.own(int(rows[lo]) >> t.pageShift) // p is &t.pages[that]
				t.rule.Update(p.data[o*d:(o+hi-lo)*d], grads[lo*d:hi*d], nil, 1)
				if p.touch != nil {
					setAll(p.touch[o:o+hi-lo], touch)
				}
				markDirty(p.dirty, o, o+hi-lo)
				t.stamp(p, o, o+hi-lo)
				continue
			}
		}
		n := 0 // rows gathered
		cur, data := -1, []float32(nil)
		for i := lo; i < hi; i++ {
			if j := i + aheadBucket; j < hi && rows[j] >= 0 {
				t.prefetchRow(int(rows[j]))
			}
			r := int(rows[i])
			if r < 0 {
				continue
			}
			if pi := r >> t.pageShift; pi != cur {
				cur, data = pi, t.pages[pi].data
			}
			row := data[(r&t.pageMask)*stride:][:stride:stride]
			if d == 1 {
				val[n] = row[0]
				for s := range slots {
					state[s*per+n] = row[s+1]
				}
				if missing {
					gb[n] = grads[i]
				}
			} else {
				copy(val[n*d:(n+1)*d], row[:d])
				for s := range slots {
					copy(state[(s*per+n)*d:(s*per+n+1)*d], row[(s+1)*d:(s+2)*d])
				}
				if missing {
					copy(gb[n*d:(n+1)*d], grads[i*d:(i+1)*d])
				}
			}
			n++
		}
		g := grads[lo*d : hi*d]
		if missing {
			g = gb[:n*d]
		}
		for s := range slots {
			t.views[s] = state[s*per*d : (s*per+n)*d]
		}
		t.rule.Update(val[:n*d], g, t.views, 1)
		n, cur = 0, -1
		var p *page
		for i := lo; i < hi; i++ {
			r := int(rows[i])
			if r < 0 {
				continue
			}
			if pi := r >> t.pageShift; pi != cur {
				t.own(pi)
				cur, p = pi, &t.pages[pi]
			}
			o := r & t.pageMask
			row := p.data[o*stride:][:stride:stride]
			if p.ver != nil && !sameBits(row[:d], val[n*d:(n+1)*d]) {
				p.ver[o] = t.mod
			}
			if d == 1 {
				row[0] = val[n]
				for s := range slots {
					row[s+1] = state[s*per+n]
				}
			} else {
				copy(row[:d], val[n*d:(n+1)*d])
				for s := range slots {
					copy(row[(s+1)*d:(s+2)*d], state[(s*per+n)*d:(s*per+n+1)*d])
				}
			}
			if p.touch != nil {
				p.touch[o] = touch
			}
			p.dirty[o>>6] |= 1 << (o & 63)
			n++
		}
	}
}

// byCount returns the rows of rows[lo:hi] ordered by the update count
// each is to get, as count<<32 | i, in the table's scratch. A row of -1 is
// skipped, or with withNew taken as a new row (count 1).
func (t *Table) byCount(rows []int32, lo, hi int, withNew bool) []uint64 {
	g := t.group[:0]
	for i := lo; i < hi; i++ {
		if j := i + aheadBucket; j < hi && rows[j] >= 0 {
			t.prefetchRow(int(rows[j]))
		}
		r := int(rows[i])
		if r < 0 {
			if withNew {
				g = append(g, 1<<32|uint64(i))
			}
			continue
		}
		c := t.pages[r>>t.pageShift].count[r&t.pageMask]
		if c < math.MaxUint32 {
			c++
		}
		g = append(g, uint64(c)<<32|uint64(i))
	}
	slices.Sort(g)
	t.group = g
	return g
}

// gatherRun copies the values, state and gradients of the rows g (as
// byCount gives them) into the batch scratch: value n at val[n*d:], state
// slot s at state[(s*per+n)*d:], gradient at gb[n*d:]. A row of -1 gets
// its key's initial value and state.
func (t *Table) gatherRun(rows []int32, keys []uint64, grads []float32, g []uint64, val, gb, state []float32, per int) {
	d, stride := t.dim, t.stride
	for n, e := range g {
		i := int(uint32(e))
		r := int(rows[i])
		copy(gb[n*d:(n+1)*d], grads[i*d:(i+1)*d])
		if r < 0 {
			t.init.Init(keys[i], val[n*d:(n+1)*d:(n+1)*d])
			if t.slots > 0 {
				for s := range t.slots {
					v := state[(s*per+n)*d : (s*per+n+1)*d : (s*per+n+1)*d]
					clear(v)
					t.views[s] = v
				}
				t.rule.InitState(t.views)
			}
			continue
		}
		row := t.pages[r>>t.pageShift].data[(r&t.pageMask)*stride:][:stride:stride]
		copy(val[n*d:(n+1)*d], row[:d])
		for s := range t.slots {
			copy(state[(s*per+n)*d:(s*per+n+1)*d], row[(s+1)*d:(s+2)*d])
		}
	}
}

// pushCounted is pushBatched for a rule that reads its step: each batch
// of up to batchRows values is ordered by the update count each row gets
// (byCount) and every run of rows with the same count is updated by one
// Update call with that count, so the result is bit for bit that of one
// Update per row.
func (t *Table) pushCounted(rows []int32, grads []float32, touch uint32) {
	d, slots, stride := t.dim, t.slots, t.stride
	per, val, gb, state := t.batchScratch()
	for lo := 0; lo < len(rows); lo += per {
		g := t.byCount(rows, lo, min(lo+per, len(rows)), false)
		t.countRuns(rows, nil, grads, g, per, val, gb, state, func(run []uint64, c uint64) {
			for n, e := range run {
				r := int(rows[uint32(e)])
				t.own(r >> t.pageShift)
				p := &t.pages[r>>t.pageShift]
				o := r & t.pageMask
				row := p.data[o*stride:][:stride:stride]
				if p.ver != nil && !sameBits(row[:d], val[n*d:(n+1)*d]) {
					p.ver[o] = t.mod
				}
				copy(row[:d], val[n*d:(n+1)*d])
				for s := range slots {
					copy(row[(s+1)*d:(s+2)*d], state[(s*per+n)*d:(s*per+n+1)*d])
				}
				p.count[o] = uint32(c)
				if p.touch != nil {
					p.touch[o] = touch
				}
				p.dirty[o>>6] |= 1 << (o & 63)
			}
		})
	}
}

// batchScratch is the scratch a batched update gathers rows into: per rows
// each of values, gradients and every state slot.
func (t *Table) batchScratch() (per int, val, gb, state []float32) {
	d := t.dim
	per = max(1, batchRows/d) // rows per batch
	if len(t.scratch) < per*d*(2+t.slots) {
		t.scratch = make([]float32, per*d*(2+t.slots))
	}
	return per, t.scratch[:per*d], t.scratch[per*d : 2*per*d], t.scratch[2*per*d:]
}

// countRuns updates the batch rows g lists (byCount's order) in runs of one
// update count: each run is gathered into val, gb and state (keys, if not
// nil, for gatherRun's new rows), updated by one Update call with its
// count, and handed to f, its n-th row's results at row n of val and state.
func (t *Table) countRuns(rows []int32, keys []uint64, grads []float32, g []uint64, per int, val, gb, state []float32, f func(run []uint64, c uint64)) {
	d := t.dim
	for a := 0; a < len(g); {
		c := g[a] >> 32
		b := a + 1
		for b < len(g) && g[b]>>32 == c {
			b++
		}
		run := g[a:b]
		t.gatherRun(rows, keys, grads, run, val, gb, state, per)
		n := len(run)
		for s := range t.slots {
			t.views[s] = state[s*per*d : (s*per+n)*d]
		}
		t.rule.Update(val[:n*d], gb[:n*d], t.views, int64(c))
		f(run, c)
		a = b
	}
}

// run reports whether rows are consecutive row ids in one page, and where
// they start.
func (t *Table) run(rows []int32) (p *page, o int, ok bool) {
	if len(rows) == 0 || rows[0] < 0 {
		return nil, 0, false
	}
	r0 := int(rows[0])
	o = r0 & t.pageMask
	p = &t.pages[r0>>t.pageShift]
	if o+len(rows) > len(p.keys) {
		return nil, 0, false
	}
	for i, r := range rows {
		if int(r) != r0+i {
			return nil, 0, false
		}
	}
	return p, o, true
}

func setAll[T any](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

// PullSet is Pull(ks.Keys(), out).
func (t *Table) PullSet(ks *KeySet, out []float32) error {
	d := t.dim
	if len(out) != len(ks.keys)*d {
		return fmt.Errorf("%w: Pull of %d keys with Dim %d needs %d floats, got %d", ErrShape, len(ks.keys), d, len(ks.keys)*d, len(out))
	}
	ks.setRows(t)
	t.resolve(ks, true)
	stride := t.stride
	if stride == d {
		// Values only: copy runs of consecutive rows at once.
		for lo := 0; lo < len(ks.rows); lo += batchRows {
			hi := min(lo+batchRows, len(ks.rows))
			if p, o, ok := t.run(ks.rows[lo:hi]); ok {
				copy(out[lo*d:hi*d], p.data[o*d:(o+hi-lo)*d])
				continue
			}
			t.pullRows(ks, lo, hi, out)
		}
		return nil
	}
	t.pullRows(ks, 0, len(ks.rows), out)
	return nil
}

// pullRows copies the rows of keys lo..hi of ks (or their initial values)
// into out.
func (t *Table) pullRows(ks *KeySet, lo, hi int, out []float32) {
	d, stride := t.dim, t.stride
	cur, data := -1, []float32(nil)
	if d == 1 {
		for i := lo; i < hi; i++ {
			r := int(ks.rows[i])
			if r < 0 {
				t.init.Init(ks.keys[i], out[i:i+1:i+1])
				continue
			}
			if pi := r >> t.pageShift; pi != cur {
				cur, data = pi, t.pages[pi].data
			}
			out[i] = data[(r&t.pageMask)*stride]
		}
		return
	}
	for i := lo; i < hi; i++ {
		r := int(ks.rows[i])
		dst := out[i*d : (i+1)*d : (i+1)*d]
		if r < 0 {
			t.init.Init(ks.keys[i], dst)
			continue
		}
		if pi := r >> t.pageShift; pi != cur {
			cur, data = pi, t.pages[pi].data
		}
		o := (r & t.pageMask) * stride
		copy(dst, data[o:o+d])
	}
}
