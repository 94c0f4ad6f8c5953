package synth

import (
	"math"

	"github.com/paramserv/paramserv/internal/mix"
)

const golden = 0x9e3779b97f4a7c15

// stream is a splitmix64 random stream: fully specified here and in
// internal/mix, so the data depend on no library's version.
type stream struct{ s uint64 }

func newStream(seed, id uint64) stream {
	return stream{s: mix.SplitMix64(seed) ^ mix.SplitMix64(id+golden)}
}

func (r *stream) next() uint64 {
	r.s += golden
	return mix.SplitMix64(r.s)
}

// float returns a uniform float64 in [0, 1).
func (r *stream) float() float64 { return float64(r.next()>>11) * 0x1p-53 }

// gaussian maps a 64-bit hash to a standard normal (Box-Muller on two
// uniforms derived from it).
func gaussian(h uint64) float64 {
	u1 := float64(h>>11+1) * 0x1p-53 // (0, 1]
	u2 := float64(mix.SplitMix64(h+golden)>>11) * 0x1p-53
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// perm32 is a bijection of uint32 keyed by k: distinct ranks give distinct
// values, and the values do not reveal the ranks.
func perm32(x uint32, k uint64) uint32 {
	x ^= uint32(k)
	x *= 0x7feb352d
	x ^= x >> 15
	x += uint32(k >> 32)
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// zipf samples ranks 0..n-1 with P(r) roughly proportional to (r+1)^-s.
type zipf struct {
	n   uint64
	one bool    // s == 1
	a   float64 // (n+1)^(1-s) - 1, or ln(n+1) when s == 1
	inv float64 // 1/(1-s)
}

func newZipf(n uint64, s float64) zipf {
	z := zipf{n: n}
	if math.Abs(1-s) < 1e-9 {
		z.one, z.a = true, math.Log(float64(n)+1)
	} else {
		z.a, z.inv = math.Pow(float64(n)+1, 1-s)-1, 1/(1-s)
	}
	return z
}

// rank inverts the continuous power law on [1, n+1) at u in [0, 1).
func (z *zipf) rank(u float64) uint64 {
	var x float64
	if z.one {
		x = math.Exp(u * z.a)
	} else {
		x = math.Pow(1+u*z.a, z.inv)
	}
	if !(x >= 1) {
		return 0 // rounding at u near 0
	}
	return min(uint64(x)-1, z.n-1)
}
