package sparse

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Frozen returns a copy of the table's rows that Export and All can read
// while the table goes on changing: the row pages (keys, values, state,
// counts, touch steps, liveness) copied as they are, without sorting and
// without the index or the admission sketch. It costs one memory copy of the
// pages, so a server can take it under its lock and do the sorting and
// encoding of a checkpoint after releasing it. The copy supports Export,
// All, Len and Dim only; any other call on it is a programming error.
func (t *Table) Frozen() *Table {
	c := &Table{
		dim: t.dim, slots: t.slots, stride: t.stride, rule: t.rule,
		keepTouch: t.keepTouch, keepCount: t.keepCount,
		pageShift: t.pageShift, pageMask: t.pageMask,
		highWater: t.highWater, freeHead: -1, live: t.live,
		base: t.base, clock: t.clock, maxRows: t.maxRows,
		pages: make([]page, len(t.pages)),
	}
	// The copy is memory bandwidth and page faults: spread it over the
	// cores, a page at a time.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(t.pages)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(t.pages) {
					return
				}
				p := &t.pages[i]
				q := &c.pages[i]
				q.keys = append([]uint64(nil), p.keys...)
				q.data = append([]float32(nil), p.data...)
				q.live = append([]uint64(nil), p.live...)
				if p.touch != nil {
					q.touch = append([]uint32(nil), p.touch...)
				}
				if p.count != nil {
					q.count = append([]uint32(nil), p.count...)
				}
			}
		}()
	}
	wg.Wait()
	return c
}
