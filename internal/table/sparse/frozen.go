package sparse

// Frozen returns a copy of the table's rows that Export and All can read
// while the table goes on changing: the row pages (keys, values, state,
// counts, touch steps, liveness) copied as they are, without sorting and
// without the index or the admission sketch. It costs one memory copy of the
// pages, so a server can take it under its lock and do the sorting and
// encoding of a checkpoint after releasing it. The copy supports Export,
// All, Len and Dim only; any other call on it is a programming error.
func (t *Table) Frozen() *Table { return t.FrozenIn(nil) }

// FrozenIn is Frozen, copying into m's memory (see FrozenMem) where it has
// the room; m may be nil. m must not be used again.
func (t *Table) FrozenIn(m *FrozenMem) *Table {
	c := &Table{
		dim: t.dim, slots: t.slots, stride: t.stride, rule: t.rule,
		keepTouch: t.keepTouch, keepCount: t.keepCount,
		pageShift: t.pageShift, pageMask: t.pageMask,
		highWater: t.highWater, freeHead: -1, live: t.live,
		base: t.base, clock: t.clock, maxRows: t.maxRows,
		pages: make([]page, len(t.pages)), par: t.par,
	}
	if m != nil && len(m.pages) < len(t.pages) {
		m.pages = append(m.pages, make([]page, len(t.pages)-len(m.pages))...)
	}
	// The copy is memory bandwidth (and page faults, without m): spread it
	// over the cores, a page at a time.
	t.runner().Run(len(t.pages), func(i int) {
		p := &t.pages[i]
		q := &c.pages[i]
		var mem page
		if m != nil {
			mem = m.pages[i]
		}
		copyPageInto(q, p, mem)
	})
	return c
}

// copyPageInto sets q's slices to copies of p's, in mem's memory where it
// has room (see into); q may be p, to give a page memory of its own.
func copyPageInto(q, p *page, mem page) {
	q.keys = into(mem.keys, p.keys)
	q.data = into(mem.data, p.data)
	q.live = into(mem.live, p.live)
	if p.touch != nil {
		q.touch = into(mem.touch, p.touch)
	}
	if p.count != nil {
		q.count = into(mem.count, p.count)
	}
}
