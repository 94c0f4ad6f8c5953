//go:build cgo && openblas

package mlp

// widenDgemm is the default build's; BenchmarkSgemm skips it here.
var widenDgemm func(s *widenScratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)

type widenScratch struct{}

// The default build's blocking, whose edges gemmCases crosses.
const mr, nr, kc, mc, nc = 6, 16, 256, 144, 4096
