//go:build !(cgo && openblas)

package mlp

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// The pure-Go kernel computes every product as the assembly one does, to
// float32's accuracy (the assembly's FMA rounds once a product, Go's
// multiply and add twice on amd64).
func TestSgemmKernelGo(t *testing.T) {
	defer func(was bool) { useFMA = was }(useFMA)
	useFMA = false
	rng := rand.New(rand.NewPCG(7, 11))
	s := new(scratch)
	for _, g := range gemmCases(true) {
		checkGemm(t, s, rng, g)
	}
}

// With Model.SetParallel, the rows of c spread over goroutines give the bits
// of the serial product, for every transpose the network uses and shapes
// that leave a goroutine a partial tile or none.
func TestParallelSgemmMatchesSerial(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(5))
	rng := rand.New(rand.NewPCG(9, 1))
	for _, g := range []gemmCase{
		{m: 130, n: 100, k: 300}, {tA: true, m: 784, n: 100, k: 100}, {tB: true, m: 100, n: 100, k: 10},
		{m: 1000, n: 100, k: 784}, {m: 13, n: 1000, k: 2*kc + 1}, {tA: true, m: 2*mc + 1, n: 33, k: kc + 3},
	} {
		a, lda, b, ldb := g.operands(rng)
		var got [2][]float32
		for i, par := range []bool{false, true} {
			s := &scratch{parallel: par}
			got[i] = make([]float32, g.m*g.n)
			sgemm(s, g.tA, g.tB, g.m, g.n, g.k, a, lda, b, ldb, got[i], g.n)
		}
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				t.Fatalf("%v: element %d serial %v, parallel %v", g, i, got[0][i], got[1][i])
			}
		}
	}
}

// widenDgemm is this build's sgemm before the float32 kernel, for
// BenchmarkSgemm: the operands widened to float64, multiplied by gonum's
// Dgemm in tiles small enough that it runs on one goroutine, and rounded
// back.
var widenDgemm = func(s *widenScratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	a64 := widen(&s[0], a[:(ar-1)*lda+ac])
	b64 := widen(&s[1], b[:(br-1)*ldb+bc])
	c64 := grow64(&s[2], (m-1)*ldc+n)
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	const tileM, tileN, tileK = 64, 192, 256
	for i := 0; i < m; i += tileM {
		mi := min(tileM, m-i)
		for j := 0; j < n; j += tileN {
			nj := min(tileN, n-j)
			ct := blas64.General{Rows: mi, Cols: nj, Data: c64[i*ldc : (i+mi-1)*ldc+j+nj][j:], Stride: ldc}
			for l := 0; l < k; l += tileK {
				kl := min(tileK, k-l)
				at := blas64.General{Rows: mi, Cols: kl, Stride: lda}
				if tA {
					at.Rows, at.Cols = kl, mi
					at.Data = a64[l*lda+i : (l+kl-1)*lda+i+mi]
				} else {
					at.Data = a64[i*lda+l : (i+mi-1)*lda+l+kl]
				}
				bt := blas64.General{Rows: kl, Cols: nj, Stride: ldb}
				if tB {
					bt.Rows, bt.Cols = nj, kl
					bt.Data = b64[j*ldb+l : (j+nj-1)*ldb+l+kl]
				} else {
					bt.Data = b64[l*ldb+j : (l+kl-1)*ldb+j+nj]
				}
				beta := 1.0
				if l == 0 {
					beta = 0
				}
				blas64.Gemm(ta, tb, 1, at, bt, beta, ct)
			}
		}
	}
	for r := range m {
		row := c[r*ldc : r*ldc+n]
		for j, v := range c64[r*ldc : r*ldc+n] {
			row[j] = float32(v)
		}
	}
}

type widenScratch [3][]float64

func grow64(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	return (*buf)[:n]
}

func widen(buf *[]float64, src []float32) []float64 {
	dst := grow64(buf, len(src))
	for i, v := range src {
		dst[i] = float64(v)
	}
	return dst
}
