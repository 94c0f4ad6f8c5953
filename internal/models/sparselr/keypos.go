package sparselr

import "math/bits"

// keyPos maps the keys of one batch to their places in the batch's list of
// distinct keys: open addressing with linear probing over a power-of-two
// array sized for the batch, emptied between batches by a generation
// stamp rather than by clearing, so a batch costs about one probe a
// nonzero (a Go map took three times as long in NextBatch) and a large set
// (the evaluation's keys) 16 bytes a slot, at most 3/4 full (a Go map held
// 68 MB for the 676k keys of 200k test rows, this 16 MB). Not safe for
// concurrent use.
type keyPos struct {
	slots []posSlot
	gen   uint32
	shift uint8 // 64 - log2(len(slots))
}

// posSlot is one slot of a keyPos, in one 16-byte piece so a probe reads
// one cache line.
type posSlot struct {
	key   uint64
	pos   int32  // index in the batch's keys
	stamp uint32 // the slot is in use when it equals keyPos.gen
}

// reset empties p for a batch of the given number of examples; it starts
// sized for 32 distinct keys an example and grows when a batch holds more.
func (p *keyPos) reset(examples int) {
	if p.slots == nil {
		p.size(max(64, examples*32))
	}
	p.gen++
	if p.gen == 0 { // wrapped: old stamps could match again
		clear(p.slots)
		p.gen = 1
	}
}

// size makes p an empty set of at least 2n slots.
func (p *keyPos) size(n int) {
	lg := bits.Len(uint(2*n - 1))
	p.slots = make([]posSlot, 1<<lg)
	p.shift = uint8(64 - lg)
	p.gen = 1
}

// slot returns k's index in *keys, appending k first if it is not there.
func (p *keyPos) slot(k uint64, keys *[]uint64) int32 {
	if 4*len(*keys) >= 3*len(p.slots) { // at most 3/4 full
		p.grow(*keys)
	}
	mask := uint64(len(p.slots) - 1)
	// Fibonacci hashing: the high bits of the product mix every key bit,
	// so small sequential ids (LIBSVM) spread as well as hashed ones.
	for i := (k * 0x9e3779b97f4a7c15) >> p.shift; ; i = (i + 1) & mask {
		s := &p.slots[i]
		if s.stamp != p.gen {
			*s = posSlot{key: k, pos: int32(len(*keys)), stamp: p.gen}
			*keys = append(*keys, k)
			return s.pos
		}
		if s.key == k {
			return s.pos
		}
	}
}

// grow doubles p and enters keys, the batch's distinct keys so far.
func (p *keyPos) grow(keys []uint64) {
	p.size(len(p.slots))
	var again []uint64
	for _, k := range keys {
		p.slot(k, &again)
	}
}
