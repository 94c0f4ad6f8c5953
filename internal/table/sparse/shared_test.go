package sparse

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// A copy-on-write copy keeps exporting the rows of its cut while the table
// goes on changing by every path that writes rows (Push, PushSet in
// batches and row by row, Pull creating rows, Evict, Import), read on
// another goroutine meanwhile (run with -race); the table itself ends
// bit for bit as a twin that was never copied. Once released, the table
// writes its pages in place again.
func TestFrozenSharedUnchangedByWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule optim.Config
		dim  int
	}{
		{"ftrl-dim3", optim.Config{Name: "ftrl", LearningRate: 0.1}, 3},
		{"sgd-dim1", optim.Config{Name: "sgd", LearningRate: 0.1}, 1},   // batched, in place
		{"adam-dim2", optim.Config{Name: "adam", LearningRate: 0.1}, 2}, // update counts: row by row
	} {
		t.Run(tc.name, func(t *testing.T) {
			newTable := func() *Table {
				rule, err := optim.New(tc.rule)
				if err != nil {
					t.Fatal(err)
				}
				tb, err := New(Config{Dim: tc.dim, Rule: rule, EvictAfterSteps: 4})
				if err != nil {
					t.Fatal(err)
				}
				tb.pageShift, tb.pageMask = 8, 1<<8-1 // many pages of few rows
				return tb
			}
			tb, twin := newTable(), newTable()
			rng := rand.New(rand.NewPCG(3, 4))
			var ks KeySet
			step := int64(0)
			// op applies writes of one kind (all kinds when kind < 0) for n
			// keys to both tables.
			op := func(kind, n int) {
				step++
				keys := make([]uint64, n)
				for i := range keys {
					keys[i] = rng.Uint64N(10_000)
				}
				keys = distinct(keys)
				grads := make([]float32, tc.dim*max(len(keys), 8))
				for i := range grads {
					grads[i] = float32(rng.NormFloat64())
				}
				out := make([]float32, 2*tc.dim)
				pullKeys := []uint64{rng.Uint64N(1 << 40), rng.Uint64N(1 << 40)}
				imp := Snapshot{Dim: tc.dim, Keys: []uint64{keys[0], 1<<41 + uint64(step)}, Values: make([]float32, 2*tc.dim)}
				if imp.Keys[0] > imp.Keys[1] {
					imp.Keys[0], imp.Keys[1] = imp.Keys[1], imp.Keys[0]
				}
				for range tb.slots {
					imp.State = append(imp.State, make([]float32, 2*tc.dim))
				}
				var run []uint64 // keys of consecutive rows of one page
				for pi := len(tb.pages) - 1; pi >= 0 && len(run) < 8; pi-- {
					p := &tb.pages[pi]
					run = run[:0]
					for o := 0; o < len(p.keys) && len(run) < 8; o++ {
						if p.live[o>>6]&(1<<(o&63)) != 0 {
							run = append(run, p.keys[o])
						} else {
							run = run[:0]
						}
					}
				}
				for _, x := range []*Table{tb, twin} {
					if kind < 0 || kind == 0 {
						if err := x.Push(keys, grads[:tc.dim*len(keys)], step); err != nil {
							t.Fatal(err)
						}
					}
					if kind < 0 || kind == 1 {
						ks.Reset(keys)
						if err := x.PushSet(&ks, grads[:tc.dim*len(keys)], step); err != nil {
							t.Fatal(err)
						}
					}
					if kind < 0 || kind == 2 {
						if err := x.Pull(pullKeys, out); err != nil {
							t.Fatal(err)
						}
					}
					if kind < 0 || kind == 3 {
						if err := x.Import(imp); err != nil {
							t.Fatal(err)
						}
					}
					if kind < 0 || kind == 4 {
						x.Evict(step)
					}
					if kind == 5 { // rows in a run of one page: updated in place
						ks.Reset(run)
						if err := x.PushSet(&ks, grads[:tc.dim*len(run)], step); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			ops := func() { op(-1, 1000) }
			// checkCopy applies each kind of write alone, to a few pages,
			// each to a new copy, and checks the copy after it.
			checkCopy := func() {
				t.Helper()
				for kind := range 6 {
					want := tb.Export()
					cp := tb.FrozenShared(nil)
					op(kind, 3)
					if got := cp.Export(); !reflect.DeepEqual(got, want) {
						t.Fatalf("after writes of kind %d the copy exports rows that differ from the table's at the cut", kind)
					}
					cp.Release()
				}
			}
			for range 4 {
				ops()
			}
			if len(tb.pages) < 8 {
				t.Fatalf("%d pages: the test needs several", len(tb.pages))
			}
			want := tb.Export()
			cp := tb.FrozenShared(tb.FrozenSize().Alloc())
			if tb.cow.state.mem.Load() == nil {
				t.Fatal("FrozenShared did not keep the memory it was given")
			}
			var wg sync.WaitGroup
			wg.Add(1)
			var during Snapshot
			go func() {
				defer wg.Done()
				during = cp.Export()
			}()
			checkCopy()
			for range 3 {
				ops()
			}
			wg.Wait()
			if !reflect.DeepEqual(during, want) {
				t.Fatal("the copy exported, while the table changed, rows that differ from the table's at the cut")
			}
			if got := cp.Export(); !reflect.DeepEqual(got, want) {
				t.Fatal("the copy exports, after the table changed, rows that differ from the table's at the cut")
			}
			if got, w := tb.Export(), twin.Export(); !reflect.DeepEqual(got, w) {
				t.Fatal("the table differs from its twin that was never copied")
			}
			// A second copy while the first is held, then both released.
			want2 := tb.Export()
			cp2 := tb.FrozenShared(nil)
			checkCopy()
			if got := cp2.Export(); !reflect.DeepEqual(got, want2) {
				t.Fatal("a second copy exports rows that differ from the table's at its cut")
			}
			cp.Release()
			cp.Release() // twice is once
			ops()
			if got := cp2.Export(); !reflect.DeepEqual(got, want2) {
				t.Fatal("releasing one copy let the table change the pages another copy shares")
			}
			cp2.Release()
			if st := tb.cow.state; st != nil && st.mem.Load() != nil {
				t.Fatal("the memory for copies of pages is kept after every copy was released")
			}
			ops()
			data := &tb.pages[0].data[0]
			ops()
			if &tb.pages[0].data[0] != data {
				t.Fatal("after every copy was released the table still copies its pages before writing")
			}
			if got, w := tb.Export(), twin.Export(); !reflect.DeepEqual(got, w) {
				t.Fatal("the table differs from its twin that was never copied")
			}
		})
	}
}

func distinct(keys []uint64) []uint64 {
	seen := map[uint64]bool{}
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
