package sparse

import (
	"math/bits"
	"unsafe"

	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/mix"
)

// The index is open addressing with linear probing over buckets of
// bucketSlots uint32 slots (64 bytes, one cache line). A key's home bucket
// is chosen from the high bits of its hash; it goes in the first bucket from
// home that has an empty slot. Invariant: every entry's buckets from home up
// to (not including) its own are full. A lookup therefore scans buckets from
// home and stops after the first bucket with an empty slot, and a deletion
// restores the invariant by shifting later entries back (see deleteSlot), so
// there are no tombstones.
//
// Growth is incremental once the table holds incrementalFrom rows: the
// full index is kept as the old one (read-only from then on), a larger
// empty index takes its place, and every row created afterwards first
// moves migrateRows rows of the old index into the new one, in row order
// (keys read from the pages in sequence), so no push waits for the whole
// index to be rebuilt. Until the last old row has moved, a key not in the
// new index is looked for in the old one and, when found there, entered
// into the new one at once. The old index is never written: an entry of it
// counts only if its row is live and holds the key, so rows freed (and
// reused) meanwhile need nothing done to it. Whatever else rebuilds or
// resizes the index first finishes the move (settle).
const (
	bucketSlots = 16
	maxLoad     = 0.90 // grow when live rows would pass this share of slots
	growLoad    = 0.72 // load just after growing: sizes grow by 1.25x
)

// incrementalFrom is the number of live rows from which the index grows
// incrementally; smaller tables rebuild it at once. A variable so that the
// tests can move every table through incremental growth.
var incrementalFrom = 1 << 15

// migrateRows is the number of old rows moved into the new index per row
// created while the index grows. A growth at L live rows lasts until 1.25 L;
// the move of the (at most) L old rows ends after L/migrateRows new rows,
// the first eighth of the growth, so lookups fall back to the old index
// only then and the two indexes are held together only then.
const migrateRows = 32

// migrateBatch is the number of rows migrate hashes and asks the buckets
// of before it enters them.
const migrateBatch = 8

const indexSeed = 0x243f6a8885a308d3

func hashKey(key uint64) uint64 { return mix.Murmur3(key ^ indexSeed) }

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

// home is the bucket a hash starts probing at: its fixed-point product with
// the bucket count, so the count need not be a power of two.
func (t *Table) home(h uint64) uint64 { return homeIn(h, t.nBuckets) }

func homeIn(h, nb uint64) uint64 {
	hi, _ := bits.Mul64(h, nb)
	return hi
}

func (t *Table) keyAt(r int) uint64 { return t.pages[r>>t.pageShift].keys[r&t.pageMask] }

func (t *Table) isLive(r int) bool {
	o := r & t.pageMask
	return t.pages[r>>t.pageShift].live[o>>6]&(1<<(o&63)) != 0
}

// slotOf is the index slot of row r, whose key hashes to h.
func (t *Table) slotOf(h uint64, r int) uint32 { return uint32(h)&^t.rowMask | uint32(r+1) }

// oldIndex is the index being moved out of while the index grows
// incrementally: its slots, buckets and row mask, and the rows still to
// move, [next, end).
type oldIndex struct {
	slots     []uint32
	mem       *hugemem.Mapped[uint32] // slots' memory when mapped (setIndex), else nil
	nBuckets  uint64
	rowMask   uint32
	next, end int
}

// setIndex replaces the index by an empty one of nb buckets; the caller
// refills it with rebuild. The old index is dropped first so the two never
// coexist. An index of mapIndexFrom bytes or more is memory mapped outside
// the Go heap (hugemem.Map): the index a growth replaces is then given
// back to the system when its last row has moved (migrate), where the
// heap would keep it resident and count it in the collector's target.
// The replaced index itself is left to the runtime (a failed restore puts
// it back, putState).
func (t *Table) setIndex(nb uint64) {
	t.dropOld()
	t.index, t.indexMem = nil, nil
	n := int(nb * bucketSlots)
	if 4*n >= mapIndexFrom {
		t.indexMem = hugemem.Map[uint32](n)
		t.index = t.indexMem.Slice()
	} else {
		t.index = hugemem.Lazy[uint32](n)
	}
	t.nBuckets = nb
	t.maxLive = min(int(float64(nb*bucketSlots)*maxLoad), t.maxRows)
	// Row ids stay below the peak of live rows, so below maxLive, and
	// row+1 fits in rowMask; the bits above it hold the tag.
	t.rowMask = uint32(1)<<bits.Len32(uint32(t.maxLive)) - 1
}

// mapIndexFrom is the size in bytes from which an index is mapped outside
// the Go heap (setIndex): about 200k rows. A variable so that the tests
// can map small tables' indexes (and free them) too.
var mapIndexFrom = 1 << 20

// dropOld ends an incremental growth without moving the rest (the caller
// rebuilds the index), giving the old index's memory back.
func (t *Table) dropOld() {
	t.old.mem.Free()
	t.old = oldIndex{}
}

// grow resizes the index for need live rows at growLoad: for a small table
// or a large need (an Import) it reinserts every row now; otherwise, for
// one more row, it starts an incremental move (see the top of the file).
func (t *Table) grow(need int) {
	t.settle()
	nb := uint64(float64(need)/(growLoad*bucketSlots)) + 1
	nb = max(nb, t.nBuckets+1)
	if need > t.live+1 || t.live < incrementalFrom {
		t.setIndex(nb) // new and zero: no need to clear it
		t.insertLive()
		return
	}
	old := oldIndex{slots: t.index, mem: t.indexMem, nBuckets: t.nBuckets, rowMask: t.rowMask, end: t.highWater}
	t.index, t.indexMem = nil, nil
	t.setIndex(nb)
	t.old = old
}

// migrate moves up to n rows of the old index into the new one, and drops
// the old index after its last row.
func (t *Table) migrate(n int) {
	o := &t.old
	end := min(o.next+n, o.end)
	for lo := o.next; lo < end; lo += migrateBatch {
		// Hash a few rows' keys and ask for their buckets, then enter
		// them, so that their cache misses overlap.
		var hs [migrateBatch]uint64
		hi := min(lo+migrateBatch, end)
		for r := lo; r < hi; r++ {
			if t.isLive(r) {
				hs[r-lo] = hashKey(t.keyAt(r))
				prefetch(unsafe.Pointer(&t.index[t.home(hs[r-lo])*bucketSlots]))
			}
		}
		for r := lo; r < hi; r++ {
			if !t.isLive(r) {
				continue
			}
			k, h := t.keyAt(r), hs[r-lo]
			if got, pos := t.findNew(k, h); got < 0 {
				t.index[pos] = t.slotOf(h, r)
			}
		}
	}
	o.next = end
	if end == o.end {
		t.dropOld()
	}
}

// settle finishes an incremental growth of the index.
func (t *Table) settle() {
	if t.old.slots != nil {
		t.migrate(t.old.end)
	}
}

// rebuild clears the index and inserts every live row, in row order.
func (t *Table) rebuild() {
	t.dropOld()
	clear(t.index)
	t.insertLive()
}

// insertLive inserts every live row into the index, in row order.
func (t *Table) insertLive() {
	t.forLive(func(r int, p *page, o int) {
		h := hashKey(p.keys[o])
		_, pos := t.findNew(p.keys[o], h)
		t.index[pos] = t.slotOf(h, r)
	})
}

// find returns key's row and its slot, or -1 and the slot where key belongs
// (the first empty slot of the first non-full bucket from home). While the
// index grows, a key found only in the old index is entered into the new
// one (at the slot returned).
func (t *Table) find(key, h uint64) (row, pos int) {
	row, pos = t.findNew(key, h)
	if row >= 0 || t.old.slots == nil {
		return row, pos
	}
	if row = t.findOld(key, h); row >= 0 {
		t.index[pos] = t.slotOf(h, row)
	}
	return row, pos
}

// lookup returns key's row, or -1, and changes nothing (find may enter a
// key of the old index into the new one): the lookup of the calls that
// only read, which a caller may run under a read lock.
func (t *Table) lookup(key, h uint64) int {
	r, _ := t.findNew(key, h)
	if r < 0 && t.old.slots != nil {
		r = t.findOld(key, h)
	}
	return r
}

// findNew is find in the (new) index only.
func (t *Table) findNew(key, h uint64) (row, pos int) {
	b := t.home(h)
	tag := uint32(h) &^ t.rowMask
	for {
		base := int(b) * bucketSlots
		bk := (*[bucketSlots]uint32)(t.index[base : base+bucketSlots])
		free := -1
		for i, s := range bk {
			if s == 0 {
				if free < 0 {
					free = base + i
				}
				continue
			}
			if s&^t.rowMask == tag {
				r := int(s&t.rowMask) - 1
				if t.keyAt(r) == key {
					return r, base + i
				}
			}
		}
		if free >= 0 {
			return -1, free
		}
		if b++; b == t.nBuckets {
			b = 0
		}
	}
}

// findOld returns key's row by the old index, or -1: an entry counts only
// if its row is live and holds key (see the top of the file).
func (t *Table) findOld(key, h uint64) int {
	o := &t.old
	b := homeIn(h, o.nBuckets)
	tag := uint32(h) &^ o.rowMask
	for {
		base := int(b) * bucketSlots
		bk := (*[bucketSlots]uint32)(o.slots[base : base+bucketSlots])
		free := false
		for _, s := range bk {
			if s == 0 {
				free = true
				continue
			}
			if s&^o.rowMask == tag {
				r := int(s&o.rowMask) - 1
				if t.isLive(r) && t.keyAt(r) == key {
					return r
				}
			}
		}
		if free {
			return -1
		}
		if b++; b == o.nBuckets {
			b = 0
		}
	}
}

// Lookahead. The loops over many keys (Push, Pull, key sets) ask the
// memory for what a key's lookup and update will read some keys before
// they reach it, so that the cache misses of several keys overlap instead
// of following each other: the key's index bucket aheadBucket keys ahead,
// then, aheadRow keys ahead (the bucket by then in the cache), the key and
// the row of the first slot whose tag matches.
const (
	aheadBucket = 16
	aheadRow    = 8
	aheadRing   = 32 // a power of two above aheadBucket
)

// lookahead holds the hashes of the keys from the one being looked up to
// aheadBucket after it, key i's at hs[i%aheadRing].
type lookahead struct {
	keys []uint64
	hs   [aheadRing]uint64
}

// start hashes the first keys and asks for their buckets.
func (la *lookahead) start(t *Table, keys []uint64) {
	la.keys = keys
	for i, k := range keys[:min(len(keys), aheadBucket)] {
		h := hashKey(k)
		la.hs[i] = h
		prefetch(unsafe.Pointer(&t.index[t.home(h)*bucketSlots]))
	}
}

// at returns key i's hash, having asked for what the lookups of the keys
// aheadRow and aheadBucket after it read. Calls go in increasing i from 0
// (a key may be skipped).
func (la *lookahead) at(t *Table, i int) uint64 {
	if j := i + aheadBucket; j < len(la.keys) {
		h := hashKey(la.keys[j])
		la.hs[j%aheadRing] = h
		prefetch(unsafe.Pointer(&t.index[t.home(h)*bucketSlots]))
	}
	if j := i + aheadRow; j < len(la.keys) {
		t.aheadRow(la.hs[j%aheadRing])
	}
	return la.hs[i%aheadRing]
}

// prefetchRow asks for row r's values and state (their first and last
// cache lines), its update count and its last-touched step, which an
// update reads and writes.
func (t *Table) prefetchRow(r int) {
	p := &t.pages[r>>t.pageShift]
	o := r & t.pageMask
	prefetch(unsafe.Pointer(&p.data[o*t.stride]))
	prefetch(unsafe.Pointer(&p.data[(o+1)*t.stride-1]))
	if p.count != nil {
		prefetch(unsafe.Pointer(&p.count[o]))
	}
	if p.touch != nil {
		prefetch(unsafe.Pointer(&p.touch[o]))
	}
}

// aheadRow prefetches the key and the row of the first slot in h's home
// bucket whose tag is h's.
func (t *Table) aheadRow(h uint64) {
	base := t.home(h) * bucketSlots
	bk := (*[bucketSlots]uint32)(t.index[base : base+bucketSlots])
	tag := uint32(h) &^ t.rowMask
	for _, s := range bk {
		if s != 0 && s&^t.rowMask == tag {
			r := int(s&t.rowMask) - 1
			p := &t.pages[r>>t.pageShift]
			o := r & t.pageMask
			prefetch(unsafe.Pointer(&p.keys[o]))
			prefetch(unsafe.Pointer(&p.data[o*t.stride]))
			return
		}
	}
}

// deleteSlot empties slot pos and restores the probing invariant: walking
// the buckets after the hole, an entry whose home is at or before the
// hole's bucket (cyclically) moves into the hole, and its old slot becomes
// the hole. The walk ends at a bucket that had an empty slot before the
// walk reached it, since no entry beyond it can depend on it.
func (t *Table) deleteSlot(pos int) {
	nb := t.nBuckets
	t.index[pos] = 0
	hole := pos
	holeB := uint64(pos / bucketSlots)
	j := holeB
	for {
		if j++; j == nb {
			j = 0
		}
		if j == holeB { // went all the way round: the table is never full, so unreachable
			return
		}
		base := int(j) * bucketSlots
		bk := (*[bucketSlots]uint32)(t.index[base : base+bucketSlots])
		full := true
		moved := false
		for i, s := range bk {
			if s == 0 {
				full = false
				continue
			}
			if moved {
				continue
			}
			r := int(s&t.rowMask) - 1
			hb := t.home(hashKey(t.keyAt(r)))
			// The entry depends on holeB iff its home is no later than
			// holeB on the way to j.
			if (j+nb-hb)%nb >= (j+nb-holeB)%nb {
				t.index[hole] = s
				bk[i] = 0
				hole = base + i
				moved = true
			}
		}
		if !full {
			return
		}
		if moved {
			holeB = j
		}
	}
}
