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

// SetParallel's multiply (gonum's Dgemm over goroutines) and the default
// one give the same products, for every transpose the network uses.
func TestParallelSgemmMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	const m, n, k = 130, 100, 300
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
		a, b := make([]float32, m*k), make([]float32, k*n)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		lda, ldb := k, n
		if tr[0] {
			lda = m
		}
		if tr[1] {
			ldb = k
		}
		var got [2][]float32
		for i, par := range []bool{false, true} {
			s := &scratch{parallel: par}
			got[i] = make([]float32, m*n)
			sgemm(s, tr[0], tr[1], m, n, k, a, lda, b, ldb, got[i], n)
		}
		for i := range got[0] {
			if d := math.Abs(float64(got[0][i] - got[1][i])); d > 1e-4 {
				t.Fatalf("tA=%v tB=%v: element %d serial %v, parallel %v", tr[0], tr[1], i, got[0][i], got[1][i])
			}
		}
	}
}
