//go:build !(cgo && openblas)

package mlp

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// BLAS names the matrix multiply the model computes with.
const BLAS = "gonum (pure Go)"

// scratch holds float64 copies of sgemm's operands, kept from call to
// call (a workspace has one), and whether its products may be spread over
// goroutines (Model.SetParallel).
type scratch struct {
	buf      [3][]float64
	parallel bool
}

// sgemm sets c (m×n, row stride ldc) to op(a)·op(b), where op transposes
// when tA, tB say; a is m×k (k×m if transposed) with row stride lda, b is
// k×n (n×k) with row stride ldb. All row-major float32.
//
// This build (no cgo, or no -tags openblas: the static binary) multiplies
// in float64 on gonum's Dgemm, whose assembly kernels are over twice as
// fast as its pure-Go Sgemm here: the operands are widened and the product
// rounded back, which costs a few percent of the multiply. Build with
// -tags openblas and cgo for OpenBLAS's float32 kernels.
//
// The multiply runs on the calling goroutine only, as the OpenBLAS build
// runs on one thread: a worker shares the machine's cores with the ps and
// other workers, and gonum's Dgemm, given a product of four 64×64 blocks or
// more, spreads it over GOMAXPROCS goroutines, which then compete with the
// ps's update and the client's I/O (on a 2-core machine a 1 ps + 1 worker
// job ran at 0.66× a single process) and cost about a quarter more CPU per
// step than one goroutine. gemmTiles hands Dgemm tiles small enough that it
// multiplies each serially.
func sgemm(s *scratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	if m == 0 || n == 0 {
		return
	}
	a64 := widen(&s.buf[0], a[:(ar-1)*lda+ac])
	b64 := widen(&s.buf[1], b[:(br-1)*ldb+bc])
	c64 := grow(&s.buf[2], (m-1)*ldc+n)
	if s.parallel {
		ta, tb := blas.NoTrans, blas.NoTrans
		if tA {
			ta = blas.Trans
		}
		if tB {
			tb = blas.Trans
		}
		blas64.Gemm(ta, tb, 1,
			blas64.General{Rows: ar, Cols: ac, Data: a64, Stride: lda},
			blas64.General{Rows: br, Cols: bc, Data: b64, Stride: ldb},
			0,
			blas64.General{Rows: m, Cols: n, Data: c64, Stride: ldc})
	} else {
		gemmTiles(tA, tB, m, n, k, a64, lda, b64, ldb, c64, ldc)
	}
	for r := range m {
		row := c[r*ldc : r*ldc+n]
		for j, v := range c64[r*ldc : r*ldc+n] {
			row[j] = float32(v)
		}
	}
}

// grow returns n float64s of *buf's memory, growing it if needed.
func grow(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	return (*buf)[:n]
}

// widen returns src as float64s in *buf's memory.
func widen(buf *[]float64, src []float32) []float64 {
	dst := grow(buf, len(src))
	for i, v := range src {
		dst[i] = float64(v)
	}
	return dst
}

// The tiles of gemmTiles: tileM×tileN of c, gonum's Dgemm's serial size (it
// goes parallel from 4 blocks of 64×64 of c: 64×192 is 3), and tileK of the
// inner dimension at a time, so that a tile's share of b stays in cache
// (256 measured best of 128, 256 and all of k for MNIST's 784).
const tileM, tileN, tileK = 64, 192, 256

// gemmTiles sets c (m×n) to op(a)·op(b) as Dgemm would, tile by tile. A
// tile accumulates its k tiles in order (beta 1 after the first), so each
// element is summed in the order one serial Dgemm sums it.
func gemmTiles(tA, tB bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	if k == 0 {
		for r := range m {
			clear(c[r*ldc : r*ldc+n])
		}
		return
	}
	for i := 0; i < m; i += tileM {
		mi := min(tileM, m-i)
		for j := 0; j < n; j += tileN {
			nj := min(tileN, n-j)
			ct := blas64.General{Rows: mi, Cols: nj, Data: c[i*ldc : (i+mi-1)*ldc+j+nj][j:], Stride: ldc}
			for l := 0; l < k; l += tileK {
				kl := min(tileK, k-l)
				at := blas64.General{Rows: mi, Cols: kl, Stride: lda}
				if tA {
					at.Rows, at.Cols = kl, mi
					at.Data = a[l*lda+i : (l+kl-1)*lda+i+mi]
				} else {
					at.Data = a[i*lda+l : (i+mi-1)*lda+l+kl]
				}
				bt := blas64.General{Rows: kl, Cols: nj, Stride: ldb}
				if tB {
					bt.Rows, bt.Cols = nj, kl
					bt.Data = b[j*ldb+l : (j+nj-1)*ldb+l+kl]
				} else {
					bt.Data = b[l*ldb+j : (l+kl-1)*ldb+j+nj]
				}
				beta := 1.0
				if l == 0 {
					beta = 0
				}
				blas64.Gemm(ta, tb, 1, at, bt, beta, ct)
			}
		}
	}
}
