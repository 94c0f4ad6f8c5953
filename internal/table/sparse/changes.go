package sparse

import "math/bits"

func popcount(x uint64) int { return bits.OnesCount64(x) }

// Change tracking, for incremental checkpoints. Every row carries a dirty
// bit, set when the row is created (by Pull, Push or Import) or changed (by
// Push or Import), and cleared by ResetChanges and FrozenChanges. Once
// ResetChanges has been called, Evict also records the keys it drops, so a
// delta can say which rows to delete. The list is bounded (maxDeleted): a
// table that evicts more than that between two cuts forgets the list and
// says so (FrozenChanges reports ok false), and its next checkpoint must be
// a full one.

// maxDeleted bounds the evicted keys remembered between two cuts: at least
// 1<<16, or one per four live rows.
func (t *Table) maxDeleted() int { return max(maxDeletedFloor, t.live/4) }

const maxDeletedFloor = 1 << 16

// recordDeleted remembers that key's row was dropped, once tracking is on.
func (t *Table) recordDeleted(key uint64) {
	if !t.tracking || t.changesLost {
		return
	}
	if len(t.deleted) >= t.maxDeleted() {
		t.changesLost, t.deleted = true, nil
		return
	}
	t.deleted = append(t.deleted, key)
}

// markDirty sets the dirty bits of rows [lo, hi) of a page.
func markDirty(dirty []uint64, lo, hi int) {
	// A word at a time: a bit at a time was 5% of the ps's CPU on a
	// 100k-row push of rows in runs.
	for lo < hi {
		b := lo & 63
		n := min(hi-lo, 64-b)
		dirty[lo>>6] |= ^uint64(0) >> (64 - n) << b
		lo += n
	}
}

// ResetChanges starts a new interval of change tracking: it clears every
// row's dirty bit and the list of evicted keys, and turns the recording of
// evictions on. A server calls it when it cuts a full checkpoint (with the
// cut, under the same lock) and after restoring one, whose state is then
// the base the next delta is taken against.
func (t *Table) ResetChanges() {
	for i := range t.pages {
		clear(t.pages[i].dirty)
	}
	t.tracking, t.changesLost, t.deleted = true, false, nil
}

// FrozenChanges returns what changed since the last ResetChanges or
// FrozenChanges, and starts a new interval: a Frozen-like copy holding only
// the rows created or changed (their values, state, counts and touch steps
// as they are now), and the keys Evict dropped, in the order dropped (a key may repeat: sort and
// compact them outside the lock). A key
// may be in both when it was evicted and came back: a reader applies the
// deletions first. ok is false when the changes are not known (tracking was
// never reset, or more rows were evicted than the list keeps); the copy is
// then nil, and the caller must take a full copy (Frozen) instead and call
// ResetChanges.
//
// Its cost under the caller's lock is a scan of the dirty bitmaps (one bit
// per row) and a copy of the changed rows.
func (t *Table) FrozenChanges() (rows *Table, deleted []uint64, ok bool) {
	if !t.tracking || t.changesLost {
		return nil, nil, false
	}
	n := 0
	for i := range t.pages {
		p := &t.pages[i]
		for w, l := range p.live {
			n += popcount(l & p.dirty[w])
		}
	}
	c := &Table{
		dim: t.dim, slots: t.slots, stride: t.stride, rule: t.rule,
		keepTouch: t.keepTouch, keepCount: t.keepCount,
		pageShift: t.pageShift, pageMask: t.pageMask,
		highWater: n, freeHead: -1, live: n,
		base: t.base, clock: t.clock, maxRows: t.maxRows,
	}
	rowsPer := 1 << t.pageShift
	for lo := 0; lo < n; lo += rowsPer {
		c.pages = append(c.pages, t.newPage(min(rowsPer, n-lo)))
	}
	j := 0 // the next row of c
	for i := range t.pages {
		p := &t.pages[i]
		for w, l := range p.live {
			b := l & p.dirty[w]
			for b != 0 {
				o := w<<6 | trailingZeros(b)
				b &= b - 1
				q := &c.pages[j>>t.pageShift]
				qo := j & t.pageMask
				q.keys[qo] = p.keys[o]
				copy(q.data[qo*t.stride:(qo+1)*t.stride], p.data[o*t.stride:(o+1)*t.stride])
				if p.touch != nil {
					q.touch[qo] = p.touch[o]
				}
				if p.count != nil {
					q.count[qo] = p.count[o]
				}
				q.live[qo>>6] |= 1 << (qo & 63)
				j++
			}
			p.dirty[w] = 0
		}
	}
	deleted = t.deleted
	t.deleted = nil
	return c, deleted, true
}

// ChangesKnown reports whether FrozenChanges can say what changed: tracking
// is on and no eviction was forgotten.
func (t *Table) ChangesKnown() bool { return t.tracking && !t.changesLost }

// ChangedRows is the number of live rows changed since the last
// ResetChanges or FrozenChanges.
func (t *Table) ChangedRows() int {
	n := 0
	for i := range t.pages {
		p := &t.pages[i]
		for w, l := range p.live {
			n += popcount(l & p.dirty[w])
		}
	}
	return n
}
