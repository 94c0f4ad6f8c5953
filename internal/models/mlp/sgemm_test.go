package mlp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmCase is one call of sgemm: c (m×n) = op(a)·op(b), with row strides
// wider than the rows by the pads.
type gemmCase struct {
	tA, tB           bool
	m, n, k          int
	padA, padB, padC int
}

func (g gemmCase) String() string {
	return fmt.Sprintf("%d×%d×%d tA=%v tB=%v pads %d,%d,%d", g.m, g.n, g.k, g.tA, g.tB, g.padA, g.padB, g.padC)
}

// operands returns random a and b for g with their row strides.
func (g gemmCase) operands(rng *rand.Rand) (a []float32, lda int, b []float32, ldb int) {
	ar, ac, br, bc := g.m, g.k, g.k, g.n
	if g.tA {
		ar, ac = g.k, g.m
	}
	if g.tB {
		br, bc = g.n, g.k
	}
	lda, ldb = ac+g.padA, bc+g.padB
	a, b = make([]float32, ar*lda), make([]float32, br*ldb)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	return a, lda, b, ldb
}

// checkGemm runs sgemm on case g and checks every element of c against the
// product in float64 (exact products of float32s, summed with far less error
// than float32's): |c − want| ≤ (k+2)·2⁻²⁴·Σ|a·b|, the bound of any order
// of float32 summation of k products (with or without FMA), and that sgemm
// wrote nothing between the rows (ldc > n).
func checkGemm(t *testing.T, s *scratch, rng *rand.Rand, g gemmCase) {
	t.Helper()
	a, lda, b, ldb := g.operands(rng)
	ldc := g.n + g.padC
	const fill = 12345
	c := make([]float32, g.m*ldc)
	for i := range c {
		c[i] = fill
	}
	sgemm(s, g.tA, g.tB, g.m, g.n, g.k, a, lda, b, ldb, c, ldc)
	for i := range g.m {
		for j := range ldc {
			got := c[i*ldc+j]
			if j >= g.n {
				if got != fill {
					t.Fatalf("%v: wrote c[%d,%d] = %v, past the row's %d columns", g, i, j, got, g.n)
				}
				continue
			}
			var want, mag float64
			for l := range g.k {
				ai, bi := i*lda+l, l*ldb+j
				if g.tA {
					ai = l*lda + i
				}
				if g.tB {
					bi = j*ldb + l
				}
				x, y := a[ai], b[bi]
				want += float64(x) * float64(y)
				mag += math.Abs(float64(x) * float64(y))
			}
			if d := math.Abs(float64(got) - want); !(d <= float64(g.k+2)*0x1p-24*mag) {
				t.Fatalf("%v: c[%d,%d] = %v, want %v (error %.3g of Σ|a·b| %.3g)", g, i, j, got, want, d/mag, mag)
			}
		}
	}
}

// gemmCases lists the shapes sgemm is checked on: every m, n, k from 1 to
// 17 (under, at and over the vector width and the kernel's tile), the
// model's own products, and sizes across every blocking edge.
func gemmCases(short bool) []gemmCase {
	var cs []gemmCase
	trs := [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}}
	for m := 1; m <= 17; m++ {
		for n := 1; n <= 17; n++ {
			for k := 1; k <= 17; k++ {
				if short && (m*n*k)%5 != 0 && m != 17 && n != 17 {
					continue
				}
				tr := trs[(m+n+k)%4]
				cs = append(cs, gemmCase{tA: tr[0], tB: tr[1], m: m, n: n, k: k, padA: k % 3, padB: m % 3, padC: n % 4})
			}
		}
	}
	for _, tr := range trs {
		for _, sz := range [][3]int{
			{100, 100, 784}, {100, 10, 100}, {100, 100, 10}, {784, 100, 100}, {1000, 10, 100}, // the model's
			{mc + 1, nr + 1, kc + 1}, {2*mc + 5, 3, 2*kc + 7}, {7, 2*nr + 3, kc - 1}, {mr + 1, nc + nr + 5, 3},
		} {
			cs = append(cs, gemmCase{tA: tr[0], tB: tr[1], m: sz[0], n: sz[1], k: sz[2], padA: 3, padB: 1, padC: 5})
			cs = append(cs, gemmCase{tA: tr[0], tB: tr[1], m: sz[0], n: sz[1], k: sz[2]})
		}
	}
	return cs
}

// sgemm computes every element of the product to float32's accuracy, for
// every transpose, shape and stride.
func TestSgemmMatchesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	s := new(scratch)
	for _, g := range gemmCases(testing.Short()) {
		checkGemm(t, s, rng, g)
	}
}

// sgemm with k = 0 sets c to zeros; with m or n 0 it does nothing.
func TestSgemmEmpty(t *testing.T) {
	c := []float32{1, 2, 3, 4, 5}
	sgemm(new(scratch), false, false, 2, 2, 0, nil, 1, nil, 2, c, 3)
	if want := []float32{0, 0, 3, 0, 0}; fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("k = 0: c = %v, want %v", c, want)
	}
	sgemm(new(scratch), false, false, 0, 2, 3, nil, 3, []float32{1, 2, 3, 4, 5, 6}, 2, c, 2)
	sgemm(new(scratch), false, false, 2, 0, 3, []float32{1, 2, 3, 4, 5, 6}, 3, nil, 1, c, 1)
	if want := []float32{0, 0, 3, 0, 0}; fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("m or n = 0: c = %v, want %v", c, want)
	}
}

// BenchmarkSgemm times the model's products, one step's (batch 100, hidden
// 100) and an evaluation's (1000 rows), through this build's sgemm and,
// in the default build, the widen-to-float64 gonum Dgemm it had before.
func BenchmarkSgemm(b *testing.B) {
	for _, g := range []struct {
		name string
		gemmCase
	}{
		{"x·hidW", gemmCase{m: 100, n: 100, k: 784}},
		{"h·smW", gemmCase{m: 100, n: 10, k: 100}},
		{"hT·dlogits", gemmCase{tA: true, m: 100, n: 10, k: 100}},
		{"dlogits·smWT", gemmCase{tB: true, m: 100, n: 100, k: 10}},
		{"xT·dh", gemmCase{tA: true, m: 784, n: 100, k: 100}},
		{"eval-x·hidW", gemmCase{m: 1000, n: 100, k: 784}},
	} {
		a, lda, bm, ldb := g.operands(rand.New(rand.NewPCG(1, 2)))
		c := make([]float32, g.m*g.n)
		impls := map[string]func(s *scratch){
			"sgemm": func(s *scratch) { sgemm(s, g.tA, g.tB, g.m, g.n, g.k, a, lda, bm, ldb, c, g.n) },
		}
		if widenDgemm != nil {
			var ws widenScratch
			impls["widen-dgemm"] = func(*scratch) { widenDgemm(&ws, g.tA, g.tB, g.m, g.n, g.k, a, lda, bm, ldb, c, g.n) }
		}
		for _, name := range []string{"sgemm", "widen-dgemm"} {
			f := impls[name]
			if f == nil {
				continue
			}
			b.Run(g.name+"/"+name, func(b *testing.B) {
				s := new(scratch)
				f(s) // sizes the buffers
				cpu0 := cpuTime(b)
				for b.Loop() {
					f(s)
				}
				// CPU time, which a busy machine moves less than the wall clock.
				cpu := (cpuTime(b) - cpu0).Seconds() / float64(b.N)
				b.ReportMetric(cpu*1e6, "cpu-µs/op")
				b.ReportMetric(2*float64(g.m*g.n*g.k)/cpu/1e9, "cpu-Gflop/s")
			})
		}
	}
	b.Logf("sgemm: %s", BLAS)
}
