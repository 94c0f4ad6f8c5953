package sparse

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The update is conservative: a sighting raises only the key's counters
// that equal its estimate (the minimum), never one already above it. Two
// keys that share some counters but not all: after three sightings of a
// and two of b, the counters they share hold 3 (b's sightings left them,
// being above b's estimate), b's own hold 2, a's own hold 3, and every
// other counter 0. A plain count-min update would leave 5 in the shared
// ones.
func TestSketchUpdateIsConservative(t *testing.T) {
	const w = 16
	s := newSketch(w)
	a, b := uint64(0), uint64(0)
	found := false
	for k := uint64(1); k < 100000 && !found; k++ {
		shared := 0
		ca, cb := s.cellsOf(a), s.cellsOf(k)
		for i := range ca {
			if ca[i] == cb[i] {
				shared++
			}
		}
		if shared > 0 && shared < sketchRows {
			b, found = k, true
		}
	}
	if !found {
		t.Fatal("no key shares some but not all of key 0's counters in a sketch of width 16")
	}
	for range 3 {
		s.see(a, 0)
	}
	if !s.see(b, 1) || s.see(b, 3) {
		t.Fatal("b's second sighting: estimate not 2")
	}
	want := make([]uint8, len(s.cells))
	ca, cb := s.cellsOf(a), s.cellsOf(b)
	for i := range ca {
		want[ca[i]] = 3
	}
	for i := range cb {
		if ca[i] != cb[i] {
			want[cb[i]] = 2
		}
	}
	if !slices.Equal(s.cells, want) {
		t.Fatalf("counters after 3 sightings of key %d and 2 of key %d (sharing some counters):\n got %v\nwant %v\n(a plain update raises the shared counters too)", a, b, s.cells, want)
	}
	if got := s.estimate(a); got != 3 {
		t.Fatalf("estimate of a = %d, want 3", got)
	}
	if got := s.estimate(b); got != 2 {
		t.Fatalf("estimate of b = %d, want 2", got)
	}
}

// The sketch's counters equal, byte for byte, those of a reference
// conservative update written from its definition (raise each counter of
// the key to max(counter, estimate+1), saturating at 255), over random
// sightings of many keys in a narrow sketch, so collisions and saturation
// are common; and see reports the reference's estimate against minCount.
func TestSketchMatchesConservativeReference(t *testing.T) {
	const w = 32
	s := newSketch(w)
	ref := make([]int, len(s.cells))
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 6000 {
		key := uint64(rng.ExpFloat64() * 12) // a few keys often, many rarely
		cs := s.cellsOf(key)
		est := 1 << 30
		for _, c := range cs {
			est = min(est, ref[c])
		}
		for _, c := range cs {
			ref[c] = max(ref[c], min(est+1, 255))
		}
		newEst := min(est+1, 255)
		minCount := rng.IntN(260)
		if got, want := s.see(key, minCount), newEst >= minCount; got != want {
			t.Fatalf("sighting %d of key %d: see(minCount %d) = %v, want %v (estimate %d)", i, key, minCount, got, want, newEst)
		}
		for c := range ref {
			if int(s.cells[c]) != ref[c] {
				t.Fatalf("sighting %d of key %d: counter %d = %d, want %d", i, key, c, s.cells[c], ref[c])
			}
		}
	}
	saturated := 0
	for _, c := range s.cells {
		if c == 255 {
			saturated++
		}
	}
	if saturated == 0 || saturated == len(s.cells) {
		t.Fatalf("%d of %d counters saturated; the test wants some of each", saturated, len(s.cells))
	}
}
