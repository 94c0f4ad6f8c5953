package sparse

import "sync/atomic"

// Copy-on-write copies (FrozenShared). The copy takes the table's pages as
// they are, by reference, and marks each page shared; from then on the
// table copies a shared page before it first writes to it (own), so the
// copy's pages never change. The pushes that follow a cut pay for copying
// the pages they write, a page (8192 rows) at a time, instead of every push
// waiting for a copy of the whole table under the server's lock. Once every
// copy has been released the table writes in place again.

// cowState is what a table's copy-on-write copies share with it.
type cowState struct {
	// refs counts the copies not yet released, of this table.
	refs atomic.Int64
	// mem is memory for the table's copies of shared pages, mapped
	// before the lock; dropped when the last copy is released, so that
	// what the pushes did not use is not kept until the next cut.
	mem atomic.Pointer[FrozenMem]
}

// tableCOW is a table's side of copy-on-write.
type tableCOW struct {
	state  *cowState
	shared []bool // page i is referenced by a copy: copy it before writing
}

// cowRef is a copy's side: it releases its reference once.
type cowRef struct {
	state *cowState
	done  atomic.Bool
}

// FrozenShared is Frozen by copy-on-write: it returns at once (a few words
// per page) a copy that shares the table's pages, and the table copies each
// page before it next changes it, into m's memory where m has it (m may be
// nil, and must not be used again). The copy supports what Frozen's does,
// from any goroutine, while the table goes on changing under its owner's
// lock. Call Release on the copy when done with it: until every copy of a
// table is released the table keeps copying the pages it writes first.
func (t *Table) FrozenShared(m *FrozenMem) *Table {
	if t.cow.state == nil || t.cow.state.refs.Load() == 0 {
		t.cow.state = &cowState{}
	}
	st := t.cow.state
	st.refs.Add(1)
	shared := t.cow.shared
	if len(shared) < len(t.pages) {
		shared = make([]bool, len(t.pages))
	}
	shared = shared[:len(t.pages)]
	for i := range shared {
		shared[i] = true
	}
	t.cow.shared = shared
	if m != nil {
		st.mem.Store(m)
	}
	c := &Table{
		dim: t.dim, slots: t.slots, stride: t.stride, rule: t.rule,
		keepTouch: t.keepTouch, keepCount: t.keepCount,
		pageShift: t.pageShift, pageMask: t.pageMask,
		highWater: t.highWater, freeHead: -1, live: t.live,
		base: t.base, clock: t.clock, maxRows: t.maxRows,
		pages: make([]page, len(t.pages)),
	}
	for i := range t.pages {
		p := &t.pages[i]
		c.pages[i] = page{keys: p.keys, data: p.data, live: p.live, touch: p.touch, count: p.count}
	}
	if m != nil {
		t.copyIndex(c, m.index)
	}
	c.held = t.held // the copy may read pages in memory the table took (ImportIndexedInPlace)
	c.frozenOf = &cowRef{state: st}
	return c
}

// Release says that the copy FrozenShared returned is no longer read; it
// may be called from any goroutine, more than once, and on any table (it
// does nothing on one that is not such a copy). The copy must not be used
// after.
func (t *Table) Release() {
	if r := t.frozenOf; r != nil && r.done.CompareAndSwap(false, true) {
		if r.state.refs.Add(-1) == 0 {
			r.state.mem.Store(nil)
		}
	}
}

// own makes page pi safe to write: if a copy shares it, the page gets its
// own copy of the memory the copy reads (the copy keeps the old). Every
// write to a page's keys, data, live, touch or count goes after own.
func (t *Table) own(pi int) {
	if pi >= len(t.cow.shared) || !t.cow.shared[pi] {
		return
	}
	if t.cow.state.refs.Load() == 0 { // every copy was released
		t.cow = tableCOW{}
		return
	}
	t.cow.shared[pi] = false
	t.copyPage(pi)
}

// ownRows is own for the pages of rows (ids, -1 skipped), copying them on
// every core when there are several: a large push right after a cut may
// write most pages of a table, which would otherwise be copied one after
// the other while the caller holds its lock.
func (t *Table) ownRows(rows []int32) {
	if len(t.cow.shared) == 0 {
		return
	}
	if t.cow.state.refs.Load() == 0 {
		t.cow = tableCOW{}
		return
	}
	var pages []int
	for _, r := range rows {
		if r < 0 {
			continue
		}
		if pi := int(r) >> t.pageShift; pi < len(t.cow.shared) && t.cow.shared[pi] {
			t.cow.shared[pi] = false
			pages = append(pages, pi)
		}
	}
	if len(pages) < 4 {
		for _, pi := range pages {
			t.copyPage(pi)
		}
		return
	}
	t.runner().Run(len(pages), func(i int) { t.copyPage(pages[i]) })
}

// copyPage gives page pi memory of its own, a copy of what it shares.
// Calls for different pages may run concurrently.
func (t *Table) copyPage(pi int) {
	p := &t.pages[pi]
	var mem page
	if m := t.cow.state.mem.Load(); m != nil && pi < len(m.pages) {
		mem, m.pages[pi] = m.pages[pi], page{}
	}
	copyPageInto(p, p, mem)
}

// disown records that page pi's memory was replaced (ensurePage): nothing
// shares the new memory.
func (t *Table) disown(pi int) {
	if pi < len(t.cow.shared) {
		t.cow.shared[pi] = false
	}
}
