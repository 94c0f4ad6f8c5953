package sparse

import "github.com/paramserv/paramserv/internal/hugemem"

// Memory of a growing table. Past its first slabFromPage pages, a table
// that grows row by row (Pull and Push creating rows) carves its next pages'
// keys and rows from slabs of several pages each, on huge pages where the
// system gives them (hugemem.Lazy), as an Import carves all of its pages
// from one: a lookup of a random key then reads the index, the key and the
// row through a few hundred TLB entries instead of missing the TLB on each,
// and the untouched part of the last slab takes no memory. The index is
// allocated the same way (setIndex).

// slabFromPage is the first page taken from a slab: smaller tables keep a
// plain allocation a page.
const slabFromPage = 4

// slabBytes is the least size of a slab's rows (its keys are at least an
// eighth of it, for a table of one float32 a row and no state).
const slabBytes = 8 << 20

// pageSlab is the unused rest of the current slab: whole pages' keys and
// rows.
type pageSlab struct {
	keys []uint64
	data []float32
}

// slabPage returns a new whole page whose keys and rows come from the
// current slab, starting a new slab when it is used up.
func (t *Table) slabPage() page {
	rows := 1 << t.pageShift
	if len(t.grown.keys) < rows {
		np := max(1, slabBytes/(4*rows*t.stride))
		t.grown = pageSlab{keys: hugemem.Lazy[uint64](np * rows), data: hugemem.Lazy[float32](np * rows * t.stride)}
	}
	g := &t.grown
	p := t.newPageIn(g.keys[:rows:rows], g.data[:rows*t.stride:rows*t.stride])
	g.keys, g.data = g.keys[rows:], g.data[rows*t.stride:]
	return p
}
