//go:build !(cgo && openblas)

package mlp

import (
	"runtime"
	"sync"
)

// BLAS names the matrix multiply the model computes with: in this build
// (no cgo, or no -tags openblas: the static binary) the float32 kernel of
// this file, in Go assembly with AVX2 and FMA where the CPU has them (see
// sgemm_amd64.go), in pure Go elsewhere.
var BLAS = "Go float32 kernel, " + kernelName

// The blocking of sgemm, after BLIS (Van Zee and van de Geijn, "BLIS: A
// Framework for Rapidly Instantiating BLAS Functionality", 2015): the
// micro-kernel computes an mr×nr tile of c from mr rows of op(a) and a
// sliver of b (kc rows of nr, packed so that it reads them in order). The
// sliver (at most 16 KiB) stays in the L1 cache while the kernel walks down
// a block of mc rows of a (at most 144 KiB, in L2), read where it lies:
// both of the model's layouts of a (rows, or columns when transposed) give
// the kernel sequential reads, so packing a would only copy it. The panel
// of b (kc×nc) is packed once and reused by every block of a.
const (
	mr = 6  // rows of a c tile: 12 accumulators of 8 lanes, 2 b loads, 2 broadcasts
	nr = 16 // columns of a c tile: two YMM registers
	kc = 256
	mc = 144  // a multiple of mr
	nc = 4096 // a multiple of nr
)

// scratch holds sgemm's packed panels, kept from call to call (a workspace
// has one), and whether its products may be spread over goroutines
// (Model.SetParallel).
type scratch struct {
	pa       []float32   // a last sliver of a of fewer than mr rows, packed
	pb       []float32   // a panel of b, packed
	pas      [][]float32 // the other goroutines' pa, when parallel
	parallel bool
}

// sgemm sets c (m×n, row stride ldc) to op(a)·op(b), where op transposes
// when tA, tB say; a is m×k (k×m if transposed) with row stride lda, b is
// k×n (n×k) with row stride ldb. All row-major float32.
//
// Each element of c is summed in float32 over k in order, in blocks of at
// most kc terms in the kernel's accumulator (with FMA: each product added
// unrounded), each block's partial sum then added to c. How c is split among goroutines
// changes nothing of that, so a parallel product is bit for bit the serial
// one.
//
// The multiply runs on the calling goroutine only, as the OpenBLAS build
// runs on one thread: a worker shares the machine's cores with the ps and
// other workers, and a multiply spread over GOMAXPROCS goroutines competes
// with the ps's update and the client's I/O (on a 2-core machine a 1 ps + 1
// worker job ran at 0.66× a single process with gonum's parallel Dgemm) and
// costs more CPU per step than one goroutine. Model.SetParallel spreads the
// rows of c over GOMAXPROCS goroutines, for a process that has the cores to
// itself.
func sgemm(s *scratch, tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	if lda < max(ac, 1) || ldb < max(bc, 1) || ldc < n {
		panic("mlp: sgemm: a row stride is shorter than its row")
	}
	if k == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	// Bounds, once: the packing and the kernel index within them.
	a = a[:(ar-1)*lda+ac]
	b = b[:(br-1)*ldb+bc]
	c = c[:(m-1)*ldc+n]

	workers := 1
	if s.parallel {
		// A goroutine for every 2 Mflop or so, at most one per core, each
		// with whole tiles of rows.
		workers = min(runtime.GOMAXPROCS(0), m*n*k/(1<<20), (m+mr-1)/mr)
		workers = max(workers, 1)
	}
	for jc := 0; jc < n; jc += nc {
		ncb := min(nc, n-jc)
		// k in equal blocks of at most kc (784 = 4×196, not 3×256 + 16).
		kstep := (k + (k+kc-1)/kc - 1) / ((k + kc - 1) / kc)
		for pc := 0; pc < k; pc += kstep {
			kcb := min(kstep, k-pc)
			s.pb = grow32(s.pb, kcb*roundUp(ncb, nr))
			packB(s.pb, tB, b, ldb, pc, kcb, jc, ncb)
			add := pc > 0
			if workers == 1 {
				s.pa = grow32(s.pa, mr*kcb)
				blockRows(s.pa, s.pb, tA, a, lda, 0, m, pc, kcb, ncb, c[jc:], ldc, add)
				continue
			}
			s.parallelRows(workers, tA, m, a, lda, pc, kcb, ncb, c[jc:], ldc, add)
		}
	}
}

// parallelRows is blockRows over all m rows of c, spread over workers
// goroutines (this one among them) in runs of whole tiles.
func (s *scratch) parallelRows(workers int, tA bool, m int, a []float32, lda, pc, kcb, n int, c []float32, ldc int, add bool) {
	for len(s.pas) < workers-1 {
		s.pas = append(s.pas, nil)
	}
	rows := roundUp((m+workers-1)/workers, mr)
	var wg sync.WaitGroup
	for w := 1; w < workers && w*rows < m; w++ {
		i0 := w * rows
		s.pas[w-1] = grow32(s.pas[w-1], mr*kcb)
		wg.Add(1)
		go func(pa []float32, i1 int) {
			defer wg.Done()
			blockRows(pa, s.pb, tA, a, lda, i0, i1, pc, kcb, n, c, ldc, add)
		}(s.pas[w-1], min(i0+rows, m))
	}
	s.pa = grow32(s.pa, mr*kcb)
	blockRows(s.pa, s.pb, tA, a, lda, 0, min(rows, m), pc, kcb, n, c, ldc, add)
	wg.Wait()
}

// blockRows computes rows i0..i1 of c (n columns from c[0]) += or = (add)
// their share of op(a)[:, pc:pc+kcb]·pb, pb being the packed panel of b.
// The kernel reads a where it lies (op(a)[i][p] is a[i·rs + p·cs]), mc rows
// at a time, which stay in the L2 cache while it walks across b; a last
// sliver of fewer than mr rows is packed into pa, zeros below.
func blockRows(pa, pb []float32, tA bool, a []float32, lda, i0, i1, pc, kcb, n int, c []float32, ldc int, add bool) {
	rs, cs := lda, 1
	if tA {
		rs, cs = 1, lda
	}
	var edge [mr * nr]float32
	for ic := i0; ic < i1; ic += mc {
		mcb := min(mc, i1-ic)
		for jr := 0; jr < n; jr += nr {
			nrb := min(nr, n-jr)
			bs := pb[jr*kcb : jr*kcb+kcb*nr]
			for ir := ic; ir < ic+mcb; ir += mr {
				mrb := min(mr, ic+mcb-ir)
				as, ars, acs := a[ir*rs+pc*cs:], rs, cs
				if mrb < mr {
					packA(pa, tA, a, lda, ir, mrb, pc, kcb)
					as, ars, acs = pa, 1, mr
				}
				ct := c[ir*ldc+jr:]
				if mrb == mr && nrb == nr {
					kernel(kcb, as, ars, acs, bs, ct, ldc, nr, add)
					continue
				}
				// An edge tile: the kernel writes a whole one aside (or its
				// left half), of which the part inside c is copied or added,
				// with the same float32 addition the kernel does.
				cols := nr
				if nrb <= nr/2 {
					cols = nr / 2
				}
				kernel(kcb, as, ars, acs, bs, edge[:], nr, cols, false)
				for i := range mrb {
					row, e := ct[i*ldc:i*ldc+nrb], edge[i*nr:i*nr+nrb]
					if add {
						for j, v := range e {
							row[j] += v
						}
					} else {
						copy(row, e)
					}
				}
			}
		}
	}
}

// packA copies rows i..i+mrb (mrb ≤ mr), columns pc..pc+kcb of op(a) into
// pa as one sliver: for each of the kcb columns in turn, its mr rows'
// values, zeros below the last row.
func packA(pa []float32, tA bool, a []float32, lda, i, mrb, pc, kcb int) {
	for p := range kcb {
		d := pa[p*mr : p*mr+mr : p*mr+mr]
		for r := range d {
			switch {
			case r >= mrb:
				d[r] = 0
			case tA:
				d[r] = a[(pc+p)*lda+i+r]
			default:
				d[r] = a[(i+r)*lda+pc+p]
			}
		}
	}
}

// packB copies rows pc..pc+kcb, columns jc..jc+ncb of op(b) into pb as
// slivers of nr columns: sliver s holds, for each of the kcb rows in turn,
// its nr columns' values (zeros right of the last column).
func packB(pb []float32, tB bool, b []float32, ldb, pc, kcb, jc, ncb int) {
	for jr := 0; jr < ncb; jr += nr {
		nrb := min(nr, ncb-jr)
		dst := pb[jr*kcb : jr*kcb+kcb*nr]
		if !tB {
			for p := range kcb {
				d := dst[p*nr : p*nr+nr]
				copy(d, b[(pc+p)*ldb+jc+jr:(pc+p)*ldb+jc+jr+nrb])
				clear(d[nrb:])
			}
			continue
		}
		// op(b)[p][j] = b[j][p].
		for j := range nrb {
			src := b[(jc+jr+j)*ldb+pc : (jc+jr+j)*ldb+pc+kcb]
			for p, v := range src {
				dst[p*nr+j] = v
			}
		}
		for j := nrb; j < nr; j++ {
			for p := range kcb {
				dst[p*nr+j] = 0
			}
		}
	}
}

// kernel sets (add false) or adds to (add true) the first cols (nr or
// nr/2) columns of the mr×nr tile of c at c[0] (row stride ldc) the
// product of op(a)'s mr rows of kcb, row i column p at a[i·rs + p·cs], and a
// packed sliver of b (kcb×nr): kernelFMA or kernelFMA8 where the CPU has
// AVX2 and FMA, else kernelGo.
func kernel(kcb int, a []float32, rs, cs int, b, c []float32, ldc, cols int, add bool) {
	_, _, _ = a[(mr-1)*rs+(kcb-1)*cs], b[kcb*nr-1], c[(mr-1)*ldc+cols-1]
	switch {
	case !useFMA:
		kernelGo(kcb, a, rs, cs, b, c, ldc, cols, add)
	case cols == nr:
		kernelFMA(kcb, &a[0], rs, cs, &b[0], &c[0], ldc, add)
	default:
		kernelFMA8(kcb, &a[0], rs, cs, &b[0], &c[0], ldc, add)
	}
}

// kernelGo is kernel in pure Go: each element of the tile summed over k in
// order, in float32 (which Go may fuse into FMA on CPUs that have it, as on
// arm64), 2×4 elements at a time in locals the compiler keeps in registers.
func kernelGo(kcb int, a []float32, rs, cs int, b, c []float32, ldc, cols int, add bool) {
	for i := 0; i < mr; i += 2 {
		a0, a1 := a[i*rs:], a[(i+1)*rs:]
		for j := 0; j < cols; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			for p := range kcb {
				x0, x1 := a0[p*cs], a1[p*cs]
				bs := b[p*nr+j : p*nr+j+4 : p*nr+j+4]
				b0, b1, b2, b3 := bs[0], bs[1], bs[2], bs[3]
				c00 += x0 * b0
				c01 += x0 * b1
				c02 += x0 * b2
				c03 += x0 * b3
				c10 += x1 * b0
				c11 += x1 * b1
				c12 += x1 * b2
				c13 += x1 * b3
			}
			r0 := c[i*ldc+j : i*ldc+j+4 : i*ldc+j+4]
			r1 := c[(i+1)*ldc+j : (i+1)*ldc+j+4 : (i+1)*ldc+j+4]
			if add {
				r0[0], r0[1], r0[2], r0[3] = r0[0]+c00, r0[1]+c01, r0[2]+c02, r0[3]+c03
				r1[0], r1[1], r1[2], r1[3] = r1[0]+c10, r1[1]+c11, r1[2]+c12, r1[3]+c13
			} else {
				r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
				r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
			}
		}
	}
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// grow32 returns n float32s of buf's memory, or new memory if it is short.
func grow32(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}
