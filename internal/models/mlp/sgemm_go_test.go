//go:build !(cgo && openblas)

package mlp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gemmTiles computes every element of the product, across tile edges in
// all three dimensions and for every transpose, with row strides wider
// than the matrices.
func TestGemmTilesMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 0}, {tileM + 1, tileN + 7, tileK + 3}, {2*tileM + 5, 3, 2*tileK + 1}, {7, 2*tileN + 1, 9}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				ar, ac, br, bc := m, k, k, n
				if tA {
					ar, ac = k, m
				}
				if tB {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+2, bc+1, n+3
				a := make([]float64, max(ar*lda, 1))
				b := make([]float64, max(br*ldb, 1))
				for i := range a {
					a[i] = rng.NormFloat64()
				}
				for i := range b {
					b[i] = rng.NormFloat64()
				}
				c := make([]float64, m*ldc)
				for i := range c {
					c[i] = math.NaN() // every element of the product is written
				}
				gemmTiles(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
				for i := range m {
					for j := range n {
						var want float64
						for l := range k {
							ai, bi := i*lda+l, l*ldb+j
							if tA {
								ai = l*lda + i
							}
							if tB {
								bi = j*ldb + l
							}
							x, y := a[ai], b[bi]
							want += x * y
						}
						if got := c[i*ldc+j]; !(math.Abs(got-want) <= 1e-12*float64(k+1)) {
							t.Fatalf("%d×%d×%d tA=%v tB=%v: c[%d,%d] = %v, want %v", m, n, k, tA, tB, i, j, got, want)
						}
					}
				}
			}
		}
	}
}
