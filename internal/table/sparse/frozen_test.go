package sparse

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// A Frozen copy exports what the table held when it was taken, whatever the
// table does after: pushes, new rows, evictions (and freed rows reused).
func TestFrozenExportsTheStateItWasTakenAt(t *testing.T) {
	for _, name := range []string{"ftrl", "adam"} {
		t.Run(name, func(t *testing.T) {
			rule, err := optim.New(optim.Config{Name: name, LearningRate: 0.1})
			if err != nil {
				t.Fatal(err)
			}
			tb, err := New(Config{Dim: 3, Rule: rule, EvictAfterSteps: 5})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			push := func(step int64) {
				keys := make([]uint64, 50)
				for i := range keys {
					keys[i] = rng.Uint64N(400)
				}
				grads := make([]float32, 3*len(keys))
				for i := range grads {
					grads[i] = float32(rng.NormFloat64())
				}
				if err := tb.Push(keys, grads, step); err != nil {
					t.Fatal(err)
				}
			}
			for step := range int64(20) {
				push(step)
				tb.Evict(step)
			}
			want := tb.Export()
			frozen := tb.Frozen()
			for step := int64(20); step < 40; step++ {
				push(step)
				tb.Evict(step)
			}
			if got := frozen.Export(); !reflect.DeepEqual(got, want) {
				t.Fatalf("the frozen copy exports %d rows that differ from the %d the table held", len(got.Keys), len(want.Keys))
			}
			if frozen.Len() != len(want.Keys) || frozen.Dim() != 3 {
				t.Fatalf("frozen Len %d Dim %d, want %d and 3", frozen.Len(), frozen.Dim(), len(want.Keys))
			}
			if reflect.DeepEqual(tb.Export(), want) {
				t.Fatal("the table did not change after the copy: the test proves nothing")
			}
		})
	}
}

// BenchmarkImportEmpty is a restore's Import of 1M rows of dim 1 into an
// empty table, with the bulk index build and key by key.
func BenchmarkImportEmpty(b *testing.B) {
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		b.Fatal(err)
	}
	n := 1_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	snap := Snapshot{Dim: 1, Keys: make([]uint64, n), Values: make([]float32, n), State: [][]float32{make([]float32, n), make([]float32, n)}}
	for i := range snap.Keys {
		snap.Keys[i] = uint64(i)<<20 | rng.Uint64N(1<<20)
	}
	for _, bulk := range []bool{true, false} {
		b.Run(map[bool]string{true: "bulk", false: "by_key"}[bulk], func(b *testing.B) {
			defer func(old bool) { bulkIndex = old }(bulkIndex)
			bulkIndex = bulk
			for range b.N {
				tb, err := New(Config{Dim: 1, Rule: rule})
				if err != nil {
					b.Fatal(err)
				}
				if err := tb.Import(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Import into an empty table builds the index in bucket order; every key
// must be found afterwards, including keys that overflow the last bucket
// and wrap around to the first, and the table must go on to behave as one
// filled key by key (deletes shift entries across the wrap).
func TestImportEmptyIndex(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "sgd", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	// 40 keys need 4 buckets; keys whose hash has its top two bits set
	// all have the last bucket as home: 16 fit, 24 wrap.
	wrapping := func() []uint64 {
		var keys []uint64
		for k := uint64(1); len(keys) < 40; k++ {
			if hashKey(k)>>62 == 3 {
				keys = append(keys, k)
			}
		}
		return keys
	}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := [][]uint64{wrapping()}
	for _, n := range []int{1, 15, 16, 17, 300, 5000} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		cases = append(cases, keys)
	}
	// One range of buckets, and one per core (GOMAXPROCS at least 2 here):
	// entries overflow from one range into the next and from the last
	// bucket into the first.
	defer func(old int, procs int) { parallelIndex = old; runtime.GOMAXPROCS(procs) }(parallelIndex, runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	for _, par := range []int{math.MaxInt, 0} {
		parallelIndex = par
		testImportEmptyIndex(t, rule, cases)
	}
}

func testImportEmptyIndex(t *testing.T, rule optim.Rule, cases [][]uint64) {
	for _, keys := range cases {
		keys = slices.Clone(keys)
		slices.Sort(keys)
		keys = slices.Compact(keys)
		snap := Snapshot{Dim: 1, Keys: keys, Values: make([]float32, len(keys)), State: [][]float32{}}
		for i := range snap.Values {
			snap.Values[i] = float32(i)
		}
		tb, err := New(Config{Dim: 1, Rule: rule})
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Import(snap); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(keys))
		if err := tb.Pull(keys, out); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, snap.Values) || tb.Len() != len(keys) {
			t.Fatalf("%d keys: pulled %v..., table has %d rows: the index lost keys", len(keys), out[:min(5, len(out))], tb.Len())
		}
		// Remove every other key through the index, then find the rest.
		for i, k := range keys {
			if i%2 == 0 {
				r, pos := tb.find(k, hashKey(k))
				if r < 0 {
					t.Fatalf("key %d not found", k)
				}
				tb.deleteSlot(pos)
				tb.freeRow(r)
			}
		}
		for i, k := range keys {
			if r, _ := tb.find(k, hashKey(k)); (r >= 0) != (i%2 == 1) {
				t.Fatalf("%d keys: after deleting every other, key %d (index %d) found = %v", len(keys), k, i, r >= 0)
			}
		}
	}
}

// A restore-sized Import into a new table fills its pages in parallel; the
// table must be the one Import builds key by key: the same rows, counts
// and touch steps, the same stats, and the same behaviour after.
func TestImportEmptyParallel(t *testing.T) {
	for _, dim := range []int{1, 3} {
		t.Run(fmt.Sprint("dim=", dim), func(t *testing.T) { testImportEmptyParallel(t, dim) })
	}
}

func testImportEmptyParallel(t *testing.T, dim int) {
	rule, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dim: dim, Rule: rule, EvictAfterSteps: 1000}
	probe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 2<<probe.pageShift + 777 // three pages, the last partial
	rng := rand.New(rand.NewPCG(5, 6))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = uint64(i)<<20 | rng.Uint64N(1<<20)
	}
	snap := Snapshot{Dim: dim, Keys: keys, Values: make([]float32, n*dim),
		State:   [][]float32{make([]float32, n*dim), make([]float32, n*dim)},
		Updates: make([]uint32, n), LastTouch: make([]int64, n)}
	for i := range snap.Values {
		snap.Values[i], snap.State[0][i], snap.State[1][i] = rng.Float32(), rng.Float32(), rng.Float32()
	}
	for i := range keys {
		snap.Updates[i], snap.LastTouch[i] = uint32(rng.IntN(50)), int64(100+rng.IntN(50))
	}
	build := func(bulk bool) *Table {
		defer func(old bool, par int) { bulkIndex, parallelIndex = old, par }(bulkIndex, parallelIndex)
		bulkIndex, parallelIndex = bulk, 0
		tb, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Import(snap); err != nil {
			t.Fatal(err)
		}
		return tb
	}
	got, want := build(true), build(false)
	if len(got.pages) != 3 || got.highWater != n {
		t.Fatalf("%d pages, high water %d: the parallel fill did not run", len(got.pages), got.highWater)
	}
	// Bytes may differ by the spare capacity of the page list.
	gs, ws := got.Stats(), want.Stats()
	gs.Bytes, ws.Bytes = 0, 0
	if !reflect.DeepEqual(got.Export(), snap) || gs != ws {
		t.Fatalf("the parallel import differs: stats %+v, key by key %+v", gs, ws)
	}
	push := append(slices.Clone(keys[:50]), keys[n-50:]...)
	push = append(push, 1<<62, 1<<63) // new rows after the imported ones
	grads := make([]float32, len(push)*dim)
	for i := range grads {
		grads[i] = rng.Float32() - 0.5
	}
	for _, tb := range []*Table{got, want} {
		if err := tb.Push(push, grads, 160); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got.Export(), want.Export()) {
		t.Fatal("after a push the parallel import differs from one built key by key")
	}
}

// Export of a large table sorts and copies on every core; it must give the
// snapshot the one-core loop gives, rows freed and reused included, and
// the sort must merge any number of parts.
func TestExportParallel(t *testing.T) {
	for _, dim := range []int{1, 2} {
		t.Run(fmt.Sprint("dim=", dim), func(t *testing.T) { testExportParallel(t, dim) })
	}
}

func testExportParallel(t *testing.T, dim int) {
	rule, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(Config{Dim: dim, Rule: rule, EvictAfterSteps: 5})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for step := range int64(20) {
		keys := make([]uint64, 300)
		for i := range keys {
			keys[i] = rng.Uint64N(5000)
		}
		keys = slices.Compact(slices.Sorted(slices.Values(keys)))
		grads := make([]float32, dim*len(keys))
		for i := range grads {
			grads[i] = rng.Float32() - 0.5
		}
		if err := tb.Push(keys, grads, step); err != nil {
			t.Fatal(err)
		}
		if step%7 == 6 {
			tb.Evict(step)
		}
	}
	defer func(old int) { parallelExport = old }(parallelExport)
	parallelExport = math.MaxInt
	want := tb.Export()
	if len(want.Keys) < 100 || want.Updates == nil || want.LastTouch == nil {
		t.Fatalf("%d rows: the table is too small or keeps no counts or steps to test with", len(want.Keys))
	}
	parallelExport = 0
	if got := tb.Export(); !reflect.DeepEqual(got, want) {
		t.Fatal("the parallel Export differs from the one-core loop")
	}
}

// sortKeyRows sorts keys of any spread: random, in a narrow range, sharing
// their high bits, powers of two, already sorted, reversed, nearly sorted.
func TestSortKeyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	kinds := map[string]func(i, n int) uint64{
		"random":   func(int, int) uint64 { return rng.Uint64() },
		"narrow":   func(int, int) uint64 { return 1<<40 + rng.Uint64N(1<<20) },
		"small":    func(int, int) uint64 { return rng.Uint64N(1 << 16) },
		"powers":   func(i, _ int) uint64 { return 1 << (i % 64) },
		"sorted":   func(i, _ int) uint64 { return uint64(i) * 3 },
		"reversed": func(i, n int) uint64 { return uint64(n-i) << 30 },
		"nearly": func(i, _ int) uint64 {
			if i%100 == 0 {
				return rng.Uint64()
			}
			return uint64(i) << 8
		},
		"top bit": func(int, int) uint64 { return rng.Uint64() | 1<<63 },
	}
	for name, key := range kinds {
		for _, n := range []int{0, 1, 2, 31, 33, 1000, 20_000} {
			seen := map[uint64]bool{}
			var rows []keyRow
			for i := range n {
				if k := key(i, n); !seen[k] {
					seen[k] = true
					rows = append(rows, keyRow{key: k, row: uint32(i)})
				}
			}
			want := slices.Clone(rows)
			slices.SortFunc(want, func(a, b keyRow) int { return cmp.Compare(a.key, b.key) })
			sortKeyRows(rows, nil)
			if !slices.Equal(rows, want) {
				t.Fatalf("%s, %d keys: not sorted", name, n)
			}
		}
	}
}

// The parallel Export sorts rows that are in no order, as a trained
// table's are (rows in the order keys arrived), and those in key order, as
// a restored table's are, with pages of freed rows between; Sorted reads
// any range of them as Export copies them.
func TestExportParallelOrders(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "adam", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	defer func(old int) { parallelExport = old }(parallelExport)
	const steps = 4
	for _, c := range []struct {
		order string
		dim   int
	}{{"random", 1}, {"ascending", 1}, {"ascending", 3}, {"dense", 1}, {"dense", 3}, {"narrow", 1}, {"blocks", 1}} {
		order := fmt.Sprintf("%s, dim %d", c.order, c.dim)
		tb, err := New(Config{Dim: c.dim, Rule: rule, EvictAfterSteps: 1})
		if err != nil {
			t.Fatal(err)
		}
		pageRows := 1 << tb.pageShift
		for step := range int64(steps) {
			keys := make([]uint64, pageRows)
			for i := range keys {
				switch c.order {
				case "random":
					keys[i] = rng.Uint64()
				case "ascending", "dense":
					keys[i] = uint64(step)<<32 | uint64(i)
				case "narrow":
					keys[i] = 7<<50 + rng.Uint64N(1<<18)
				case "blocks": // each page's rows in order, the pages not
					keys[i] = uint64(steps-step)<<32 | uint64(i)
				}
			}
			if c.order == "ascending" || c.order == "dense" || c.order == "blocks" {
				if err := tb.Pull(keys, make([]float32, len(keys)*tb.Dim())); err != nil {
					t.Fatal(err)
				}
			}
			grads := make([]float32, len(keys)*tb.Dim())
			for i := range grads {
				grads[i] = rng.Float32() - 0.5
			}
			if err := tb.Push(keys, grads, step); err != nil {
				t.Fatal(err)
			}
			if step == 2 && (c.order == "random" || c.order == "narrow") {
				tb.Evict(step) // frees the first step's rows, which new keys reuse
			}
		}
		if c.order == "ascending" {
			tb.Evict(steps - 1) // holes, not reused: the rows stay in key order
		}
		for procs := 1; procs <= steps+1; procs++ {
			if !slices.IsSortedFunc(tb.sortedRows(procs), func(a, b keyRow) int { return cmp.Compare(a.key, b.key) }) {
				t.Fatalf("%s: sortedRows on %d cores did not sort", order, procs)
			}
		}
		parallelExport = math.MaxInt
		want := tb.Export()
		parallelExport = 0
		if got := tb.Export(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the parallel Export differs from the one-core loop", order)
		}
		v := tb.Sorted()
		if inPlace := c.order == "ascending" || c.order == "dense"; v.InPlace() != inPlace || v.dense != (c.order == "dense") {
			t.Fatalf("%s: Sorted says in place %v, dense %v", order, v.InPlace(), v.dense)
		}
		if got := v.Snapshot(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Sorted's Snapshot differs from Export", order)
		}
		testSortedRanges(t, order, v, want, rng)
	}
}

// testSortedRanges reads ranges of v, starting anywhere, and compares them
// with want, v's table's Export.
func testSortedRanges(t *testing.T, order string, v *Sorted, want Snapshot, rng *rand.Rand) {
	t.Helper()
	n, d := len(want.Keys), want.Dim
	if v.Len() != n || !v.HasUpdates() || !v.HasLastTouch() {
		t.Fatalf("%s: Sorted has %d rows (counts %v, steps %v), Export %d", order, v.Len(), v.HasUpdates(), v.HasLastTouch(), n)
	}
	for range 40 {
		i := rng.IntN(n)
		k := 1 + rng.IntN(min(n-i, 20_000)) // up to 2.4 pages
		keys := make([]uint64, k)
		v.Keys(keys, i)
		updates := make([]int64, k)
		v.Updates(updates, i)
		touch := make([]int64, k)
		v.LastTouch(touch, i)
		for j := range k {
			if keys[j] != want.Keys[i+j] || updates[j] != int64(want.Updates[i+j]) || touch[j] != want.LastTouch[i+j] {
				t.Fatalf("%s: row %d of rows %d to %d: key %d, count %d, step %d; Export has %d, %d, %d", order, i+j, i, i+k,
					keys[j], updates[j], touch[j], want.Keys[i+j], want.Updates[i+j], want.LastTouch[i+j])
			}
		}
		e := rng.IntN(n * d)
		floats := make([]float32, 1+rng.IntN(min(n*d-e, 20_000*d)))
		for col, src := range append([][]float32{want.Values}, want.State...) {
			v.Floats(col, floats, e)
			if !slices.Equal(floats, src[e:e+len(floats)]) {
				t.Fatalf("%s: column %d, elements %d to %d differ from Export's", order, col, e, e+len(floats))
			}
		}
	}
}
