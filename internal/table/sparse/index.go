package sparse

import (
	"math/bits"

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
const (
	bucketSlots = 16
	maxLoad     = 0.90 // grow when live rows would pass this share of slots
	growLoad    = 0.72 // load just after growing: sizes grow by 1.25x
)

const indexSeed = 0x243f6a8885a308d3

func hashKey(key uint64) uint64 { return mix.Murmur3(key ^ indexSeed) }

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

// home is the bucket a hash starts probing at: its fixed-point product with
// the bucket count, so the count need not be a power of two.
func (t *Table) home(h uint64) uint64 {
	hi, _ := bits.Mul64(h, t.nBuckets)
	return hi
}

func (t *Table) keyAt(r int) uint64 { return t.pages[r>>t.pageShift].keys[r&t.pageMask] }

// setIndex replaces the index by an empty one of nb buckets; the caller
// refills it with rebuild. The old index is dropped first so the two never
// coexist.
func (t *Table) setIndex(nb uint64) {
	t.index = nil
	t.index = make([]uint32, nb*bucketSlots)
	t.nBuckets = nb
	t.maxLive = min(int(float64(nb*bucketSlots)*maxLoad), t.maxRows)
	// Row ids stay below the peak of live rows, so below maxLive, and
	// row+1 fits in rowMask; the bits above it hold the tag.
	t.rowMask = uint32(1)<<bits.Len32(uint32(t.maxLive)) - 1
}

// grow resizes the index for need live rows at growLoad and reinserts the
// rows.
func (t *Table) grow(need int) {
	nb := uint64(float64(need)/(growLoad*bucketSlots)) + 1
	nb = max(nb, t.nBuckets+1)
	t.setIndex(nb) // new and zero: no need to clear it
	t.insertLive()
}

// rebuild clears the index and inserts every live row, in row order.
func (t *Table) rebuild() {
	clear(t.index)
	t.insertLive()
}

// insertLive inserts every live row into the index, in row order.
func (t *Table) insertLive() {
	t.forLive(func(r int, p *page, o int) {
		h := hashKey(p.keys[o])
		_, pos := t.find(p.keys[o], h)
		t.index[pos] = uint32(h)&^t.rowMask | uint32(r+1)
	})
}

// find returns key's row and its slot, or -1 and the slot where key belongs
// (the first empty slot of the first non-full bucket from home).
func (t *Table) find(key, h uint64) (row, pos int) {
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
