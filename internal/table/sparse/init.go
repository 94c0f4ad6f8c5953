package sparse

import (
	"fmt"
	"math"

	"github.com/paramserv/paramserv/internal/mix"
)

// Initializer gives a new row its first value.
//
// Init must be a pure function of key and the initializer's own fields: the
// same key gets the same row whatever order keys arrive in, however many
// shards the key space is split over, and whether the row is stored or (not
// yet admitted) only read. Init is called with row of length Dim and must
// overwrite every element.
type Initializer interface {
	Init(key uint64, row []float32)
}

// Zeros starts every row at zero. It is the Initializer a nil Config.Init
// means.
type Zeros struct{}

// Init sets row to zero.
func (Zeros) Init(_ uint64, row []float32) { clear(row) }

// RandomNormal starts element i of key's row at Mean + Stddev*z, z a standard
// normal drawn from a counter-based generator keyed by (Seed, key, i). With
// Truncated, draws with |z| > 2 are redrawn, as TensorFlow's
// truncated_normal does.
type RandomNormal struct {
	Mean      float32
	Stddev    float32
	Seed      uint64
	Truncated bool
}

// Validate reports a negative or non-finite Stddev or a non-finite Mean.
func (r RandomNormal) Validate() error {
	if !finite32(r.Mean) || !finite32(r.Stddev) || r.Stddev < 0 {
		return fmt.Errorf("%w: RandomNormal{Mean: %v, Stddev: %v} (want finite values, Stddev >= 0)", ErrConfig, r.Mean, r.Stddev)
	}
	return nil
}

// Init fills row with the normal draws of (r.Seed, key).
func (r RandomNormal) Init(key uint64, row []float32) {
	base := mix.Murmur3(mix.Murmur3(key^0x6a09e667f3bcc909) ^ r.Seed)
	ctr := uint64(0)
	for i := range row {
		var z float64
		for {
			// Box-Muller from two 53-bit uniforms; u1 in (0, 1].
			u1 := 1 - unit(mix.Murmur3(base+ctr*0x9e3779b97f4a7c15))
			u2 := unit(mix.Murmur3(base + (ctr+1)*0x9e3779b97f4a7c15))
			ctr += 2
			z = math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
			if !r.Truncated || math.Abs(z) <= 2 {
				break
			}
		}
		row[i] = r.Mean + r.Stddev*float32(z)
	}
}

// RandomUniform starts element i of key's row at a uniform draw in
// [Min, Max) from a counter-based generator keyed by (Seed, key, i).
type RandomUniform struct {
	Min, Max float32
	Seed     uint64
}

// Validate reports non-finite bounds or Min > Max.
func (r RandomUniform) Validate() error {
	if !finite32(r.Min) || !finite32(r.Max) || r.Min > r.Max {
		return fmt.Errorf("%w: RandomUniform{Min: %v, Max: %v} (want finite Min <= Max)", ErrConfig, r.Min, r.Max)
	}
	return nil
}

// Init fills row with the uniform draws of (r.Seed, key).
func (r RandomUniform) Init(key uint64, row []float32) {
	base := mix.Murmur3(mix.Murmur3(key^0xbb67ae8584caa73b) ^ r.Seed)
	span := float64(r.Max) - float64(r.Min)
	for i := range row {
		u := unit(mix.Murmur3(base + uint64(i)*0x9e3779b97f4a7c15))
		row[i] = float32(float64(r.Min) + span*u)
		if row[i] >= r.Max && r.Max > r.Min { // rounding to float32 can reach Max
			row[i] = math.Nextafter32(r.Max, r.Min)
		}
	}
}

// unit maps 64 random bits to a float64 in [0, 1).
func unit(x uint64) float64 { return float64(x>>11) * (1.0 / (1 << 53)) }

func finite32(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// validator is implemented by initializers whose fields can be wrong.
type validator interface{ Validate() error }
