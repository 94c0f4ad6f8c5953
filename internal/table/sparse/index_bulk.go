package sparse

// Building the index of an empty table in one pass (Import into an empty
// table): entries sorted by range of home buckets, each range filled in
// the cache on its own core.

import "sync/atomic"

// indexEntry is what the bulk index build sorts for row r, of hash h: its
// home bucket in the high 32 bits, its index slot (tag and row) in the low.
func (t *Table) indexEntry(h uint64, r int) uint64 {
	return t.home(h)<<32 | uint64(uint32(h)&^t.rowMask|uint32(r+1))
}

// indexRows enters rows (indexEntry) into an empty index, as indexParts.
func (t *Table) indexRows(rows []uint64) {
	rg := t.bucketRanges(indexRanges(len(rows), t.runner().Width()))
	byRange := make([][][]uint64, len(rg.lo)-1)
	if len(byRange) == 1 {
		byRange[0] = [][]uint64{rows}
	} else {
		for c := range byRange {
			byRange[c] = make([][]uint64, 1)
		}
		for _, e := range rows {
			c := rg.of(e >> 32)
			byRange[c][0] = append(byRange[c][0], e)
		}
	}
	t.indexParts(byRange, rg, false)
}

// bucketRanges divides the index's buckets into nr ranges (some may be
// empty) by a multiply and a shift, cheaper per row than a division.
type bucketRanges struct {
	m  uint64   // bucket b is in range (b*m)>>32
	lo []uint64 // range c is buckets [lo[c], lo[c+1])
}

func (t *Table) bucketRanges(nr int) bucketRanges {
	nb := t.nBuckets
	rg := bucketRanges{m: max(1, uint64(nr)<<32/nb), lo: make([]uint64, nr+1)}
	for c := range nr + 1 {
		// The first b with b*m >= c<<32.
		rg.lo[c] = min(nb, (uint64(c)<<32+rg.m-1)/rg.m)
	}
	rg.lo[nr] = nb
	return rg
}

func (rg bucketRanges) of(b uint64) int { return int((b * rg.m) >> 32) }

// parallelIndex is the number of rows from which the index is built on
// every core.
var parallelIndex = 1 << 16

// indexRanges is the number of ranges of buckets an index of n rows is
// built in: for a large one, ranges of about rangeRows rows, so that a
// range's counting sort stays in the cache, and at least one per core.
func indexRanges(n, width int) int {
	if n < parallelIndex {
		return 1
	}
	return max(width, n/rangeRows)
}

// rangeRows is the number of rows a range of the index is built for
// (1 MiB of entries to sort).
const rangeRows = 1 << 16

// indexParts enters rows into an empty index, byRange[c] holding (in any
// number of lists) the entries (indexEntry) of the rows whose home bucket
// is in range c of rg. The ranges of buckets are filled on every core, each
// in the cache; the entries that would run past the end of a range (or
// past the last bucket) are entered after, through find, which puts them
// where inserting them last would.
//
// With dups, the rows' keys may repeat (rows in no order, from a file): it
// returns the row of a key entered before (dup, >= 0) and the row that
// repeats it, the index then holding garbage; else -1. Without, it returns
// -1.
func (t *Table) indexParts(byRange [][][]uint64, rg bucketRanges, dups bool) (dup, again int) {
	nr := uint64(len(byRange))
	over := make([][]uint64, nr)
	found := make([][2]int, nr)
	var next atomic.Uint64
	t.runner().Run(int(min(uint64(t.runner().Width()), nr)), func(int) {
		var fill []uint8
		for {
			c := next.Add(1) - 1
			if c >= nr {
				return
			}
			lo, hi := rg.lo[c], rg.lo[c+1]
			if uint64(cap(fill)) < hi-lo {
				fill = make([]uint8, hi-lo)
			}
			over[c], found[c] = t.indexRange(byRange[c], lo, hi, fill[:hi-lo], dups)
		}
	})
	for _, f := range found {
		if f[0] >= 0 {
			return f[0], f[1]
		}
	}
	for _, o := range over {
		for _, e := range o {
			slot := uint32(e)
			r := int(slot&t.rowMask) - 1
			k := t.keyAt(r)
			had, pos := t.find(k, hashKey(k))
			if dups && had >= 0 {
				return had, r
			}
			t.index[pos] = slot
		}
	}
	return -1, -1
}

// indexRange enters rows (indexEntry), whose home buckets are in [lo, hi),
// into those buckets, each in the first bucket from its home with a free
// slot, and returns the ones that found none before hi. fill, of hi-lo
// elements, is scratch. Entering in any order keeps the invariant (every
// bucket from an entry's home up to its own is full), as no entry leaves.
//
// With dups it also looks for an entry of the same key among those
// entered before, which lie in the buckets from its home to its own (the
// entry of a repeated key has the same home, and every bucket before its
// own is full): a slot with the same tag costs a look at the key. It
// returns the first such pair of rows (else -1, -1) and stops there.
func (t *Table) indexRange(rows [][]uint64, lo, hi uint64, fill []uint8, dups bool) (over []uint64, dup [2]int) {
	clear(fill)
	nb := hi - lo
	index := t.index[lo*bucketSlots : hi*bucketSlots]
	mask := t.rowMask
	for _, l := range rows {
		for _, e := range l {
			home := e>>32 - lo
			b := home
			for b < nb && fill[b] == bucketSlots {
				b++
			}
			if dups {
				// A bucket's entries fill its first fill[] slots.
				slot := uint32(e)
				tag := slot &^ mask
				for bb := home; bb <= min(b, nb-1); bb++ {
					for _, s := range index[bb*bucketSlots : bb*bucketSlots+uint64(fill[bb])] {
						if s&^mask == tag {
							r, again := int(s&mask)-1, int(slot&mask)-1
							if t.keyAt(r) == t.keyAt(again) {
								return nil, [2]int{r, again}
							}
						}
					}
				}
			}
			if b >= nb {
				over = append(over, e)
				continue
			}
			index[b*bucketSlots+uint64(fill[b])] = uint32(e)
			fill[b]++
		}
	}
	return over, [2]int{-1, -1}
}
