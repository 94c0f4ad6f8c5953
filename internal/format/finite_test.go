package format

import (
	"math"
	"slices"
	"testing"
)

func TestFirstNonFinite(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xffffffff)}
	finite := []float32{0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, math.Float32frombits(0x7f7fffff), math.Float32frombits(0x00800000)}
	for n := range 140 {
		f := make([]float32, n)
		for i := range f {
			f[i] = finite[i%len(finite)]
		}
		if got := FirstNonFinite(f); got != -1 {
			t.Fatalf("len %d, all finite: got %d", n, got)
		}
		for pos := 0; pos < n; pos += 1 + pos/8 {
			for _, s := range specials {
				g := slices.Clone(f)
				g[pos] = s
				if n > pos+3 {
					g[n-1] = s // a later one does not hide the first
				}
				if got := FirstNonFinite(g); got != pos {
					t.Fatalf("len %d, %v at %d: got %d", n, s, pos, got)
				}
				// A view at an odd offset, as a part of a receive buffer may be.
				if pos > 0 && FirstNonFinite(g[1:]) != pos-1 {
					t.Fatalf("len %d, %v at %d in a view from 1: got %d", n, s, pos, FirstNonFinite(g[1:]))
				}
			}
		}
	}
}

func BenchmarkAllFinite(b *testing.B) {
	f := make([]float32, 4<<20)
	b.SetBytes(int64(4 * len(f)))
	for b.Loop() {
		if !AllFinite(f) {
			b.Fatal("zeros are finite")
		}
	}
}
