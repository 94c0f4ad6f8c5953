//go:build !(cgo && openblas)

package mlp

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// BLAS names the matrix multiply the model computes with.
const BLAS = "gonum (pure Go)"

// scratch holds float64 copies of sgemm's operands, kept from call to
// call (a workspace has one).
type scratch [3][]float64

// sgemm sets c (m×n, row stride ldc) to op(a)·op(b), where op transposes
// when tA, tB say; a is m×k (k×m if transposed) with row stride lda, b is
// k×n (n×k) with row stride ldb. All row-major float32.
//
// This build (no cgo, or no -tags openblas: the static binary) multiplies
// in float64 on gonum's Dgemm, whose assembly kernels are over twice as
// fast as its pure-Go Sgemm here: the operands are widened and the product
// rounded back, which costs a few percent of the multiply. Build with
// -tags openblas and cgo for OpenBLAS's float32 kernels.
func sgemm(s *scratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ta, tb := blas.NoTrans, blas.NoTrans
	ar, ac, br, bc := m, k, k, n
	if tA {
		ta, ar, ac = blas.Trans, k, m
	}
	if tB {
		tb, br, bc = blas.Trans, n, k
	}
	if m == 0 || n == 0 {
		return
	}
	a64 := widen(&s[0], a[:(ar-1)*lda+ac])
	b64 := widen(&s[1], b[:(br-1)*ldb+bc])
	c64 := grow(&s[2], (m-1)*ldc+n)
	blas64.Gemm(ta, tb, 1,
		blas64.General{Rows: ar, Cols: ac, Data: a64, Stride: lda},
		blas64.General{Rows: br, Cols: bc, Data: b64, Stride: ldb},
		0,
		blas64.General{Rows: m, Cols: n, Data: c64, Stride: ldc})
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
