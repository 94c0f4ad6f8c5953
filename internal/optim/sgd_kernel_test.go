package optim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sgdScalar is the reference: sgd's update one value at a time.
func sgdScalar(param, grad []float32, lr float64) {
	for i, p := range param {
		param[i] = float32(float64(p) - lr*float64(grad[i]))
	}
}

// The vector kernel gives the scalar loop's bits for every length, offset
// and magnitude, subnormals, overflow to Inf and ties included.
func TestSGDKernelMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func() float32 {
		switch rng.IntN(8) {
		case 0:
			return math.Float32frombits(rng.Uint32() & 0x807fffff) // subnormal or zero
		case 1:
			return float32(rng.NormFloat64()) * math.MaxFloat32 / 4
		case 2:
			return math.Float32frombits(rng.Uint32()&0x80ffffff | 0x7e000000) // huge
		default:
			return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
		}
	}
	for _, lr := range []float64{1, 0.1, 1e-3, 3.7, 1e30, 1e-30} {
		for n := range 70 {
			for off := range 3 {
				p, g := make([]float32, n+off), make([]float32, n+off)
				for i := range p {
					p[i], g[i] = pick(), pick()
				}
				want := append([]float32(nil), p...)
				sgdScalar(want[off:], g[off:], lr)
				r := &sgd{lr: lr}
				r.Update(p[off:], g[off:], nil, 1)
				for i := range p {
					if math.Float32bits(p[i]) != math.Float32bits(want[i]) {
						t.Fatalf("lr %v, n %d, offset %d, element %d: got %v (%08x), want %v (%08x)", lr, n, off, i, p[i], math.Float32bits(p[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// BenchmarkSGDKernel compares the vector kernel with the scalar loop on 4M
// values (16 MiB, a large dense variable).
func BenchmarkSGDKernel(b *testing.B) {
	p, g := make([]float32, 4<<20), make([]float32, 4<<20)
	for i := range g {
		g[i] = float32(i%13) * 0.01
	}
	b.Run("rule", func(b *testing.B) {
		r := &sgd{lr: 0.01}
		b.SetBytes(4 * int64(len(p)))
		for b.Loop() {
			r.Update(p, g, nil, 1)
		}
	})
	b.Run("scalar", func(b *testing.B) {
		b.SetBytes(4 * int64(len(p)))
		for b.Loop() {
			sgdScalar(p, g, 0.01)
		}
	})
}
