package sparselr

import (
	"math/rand/v2"
	"testing"
)

// keyPos gives every key of a batch the place a map of first uses gives
// it, through growth (batches larger than it was sized for) and across
// batches (the stamps that empty it).
func TestKeyPosMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p keyPos
	for batch := range 50 {
		p.reset(2) // sized for 64 slots: most batches grow it
		n := rng.IntN(3000)
		span := uint64(1 + rng.IntN(2000))
		var keys []uint64
		want := map[uint64]int32{}
		for range n {
			k := rng.Uint64N(span)
			if batch%2 == 1 {
				k = rng.Uint64() % span * 0x10000 // ids sharing low bits
			}
			got := p.slot(k, &keys)
			w, ok := want[k]
			if !ok {
				w = int32(len(want))
				want[k] = w
			}
			if got != w || keys[got] != k {
				t.Fatalf("batch %d: key %d at %d (keys[%d] = %d), want %d", batch, k, got, got, keys[got], w)
			}
		}
		if len(keys) != len(want) {
			t.Fatalf("batch %d: %d distinct keys, want %d", batch, len(keys), len(want))
		}
	}
	p.gen = ^uint32(0) // the next reset wraps the stamp
	p.reset(2)
	var keys []uint64
	if got := p.slot(5, &keys); got != 0 || len(keys) != 1 {
		t.Fatalf("after the stamp wrapped: key at %d of %d keys, want 0 of 1", got, len(keys))
	}
}
