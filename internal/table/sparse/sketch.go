package sparse

import (
	"math/bits"

	"github.com/paramserv/paramserv/internal/mix"
)

// sketch is a count-min sketch of sketchRows rows of one-byte saturating
// counters, updated conservatively: a sighting raises only the counters
// that equal the key's current estimate (the minimum). The estimate never
// falls below the true count of sightings; collisions can only raise it.
type sketch struct {
	width uint64
	cells []uint8 // sketchRows*width; row i at [i*width:(i+1)*width]
}

const (
	sketchRows = 4
	sketchSeed = 0x13198a2e03707344
)

func newSketch(width int) *sketch {
	return &sketch{width: uint64(width), cells: make([]uint8, sketchRows*width)}
}

// cellsOf returns the positions of key's counters, one per row, by double
// hashing of one 64-bit hash.
func (s *sketch) cellsOf(key uint64) [sketchRows]uint64 {
	h := mix.Murmur3(key ^ sketchSeed)
	h1, h2 := h, mix.Murmur3(h)|1
	var c [sketchRows]uint64
	for i := range c {
		hi, _ := bits.Mul64(h1+uint64(i)*h2, s.width)
		c[i] = uint64(i)*s.width + hi
	}
	return c
}

// estimate is the key's count without recording a sighting.
func (s *sketch) estimate(key uint64) int {
	est := uint8(255)
	for _, c := range s.cellsOf(key) {
		est = min(est, s.cells[c])
	}
	return int(est)
}

// see records one sighting of key and reports whether its estimated count
// has reached minCount.
func (s *sketch) see(key uint64, minCount int) bool {
	cs := s.cellsOf(key)
	est := uint8(255)
	for _, c := range cs {
		est = min(est, s.cells[c])
	}
	if est < 255 {
		for _, c := range cs {
			if s.cells[c] == est {
				s.cells[c] = est + 1
			}
		}
		est++
	}
	return int(est) >= minCount
}
