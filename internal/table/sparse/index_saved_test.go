package sparse

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// A table trained by pushes (rows in the order their keys came, the index
// grown as they came, through incremental growth) and cut copy-on-write
// hands its index to the checkpoint (Sorted.Index), and ImportIndexed of
// its rows in table order with that index gives a table that holds and
// does what one restored by ImportAnyOrder (which builds the index from
// the keys) holds and does. An index that misses a row, names one twice or
// one past the rows, or holds them out of place, is refused (ErrIndex) and the
// table is left empty; a table whose rows were freed, or an index of
// another shape, gives no index or falls back to ImportAnyOrder.
func TestImportIndexed(t *testing.T) {
	defer func(old int) { incrementalFrom = old }(incrementalFrom)
	incrementalFrom = 64 // through incremental growth however few the rows
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dim: 2, Rule: rule}
	rng := rand.New(rand.NewPCG(5, 6))
	push := func(tb *Table, step int64, n int) {
		t.Helper()
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		grads := make([]float32, 2*n)
		for i := range grads {
			grads[i] = float32(rng.NormFloat64())
		}
		if err := tb.Push(keys, grads, step); err != nil {
			t.Fatal(err)
		}
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	step := int64(0)
	for src.Len() < 3<<src.pageShift || src.old.slots != nil { // three pages, the index whole
		push(src, step, 997)
		step++
	}
	cut := src.FrozenShared(src.FrozenSize().Alloc())
	view := cut.InTableOrder()
	ix, ok := view.Index()
	if !ok {
		t.Fatal("a cut of a table whose rows were never freed offers no index")
	}
	if &ix.Slots[0] == &src.index[0] || !slices.Equal(ix.Slots, src.index) {
		t.Fatal("the cut's index is not a copy of the table's")
	}
	snap := view.Snapshot()
	push(src, step, 500) // the table changes after the cut; the copy does not
	if !slices.Equal(ix.Slots, cut.saved.Slots) || reflect.DeepEqual(src.index[:len(ix.Slots)], ix.Slots) {
		t.Fatal("the index copied at the cut changed with the table")
	}
	cut.Release()

	got, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.ImportIndexed(snap, ix); err != nil {
		t.Fatal(err)
	}
	if &got.index[0] == &ix.Slots[0] || !slices.Equal(got.index, ix.Slots) {
		t.Fatal("the restored table did not take a copy of the saved index")
	}
	checkIndex(t, got)
	want, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := want.ImportAnyOrder(snap); err != nil {
		t.Fatal(err)
	}
	restored := want.Export()
	if !reflect.DeepEqual(got.Export(), restored) {
		t.Fatal("ImportIndexed holds other rows than ImportAnyOrder")
	}
	// Both go on alike: lookups of every key, new keys (the index grows
	// from the saved size), evictions.
	state := rng.Uint64()
	for i := range 5 {
		for _, tb := range []*Table{got, want} {
			*rng = *rand.New(rand.NewPCG(state, uint64(i)))
			push(tb, step+int64(i), 3000)
			keys := append(slices.Clone(snap.Keys[:100]), 1, 2, 3)
			tb.Evict(step + int64(i) - 2)
			out := make([]float32, 2*len(keys))
			if err := tb.Pull(keys, out); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(got.Export(), want.Export()) {
			t.Fatalf("after %d more pushes the tables differ", i+1)
		}
		checkIndex(t, got)
	}

	bad := map[string]func(s []uint32){
		"a row missing": func(s []uint32) { s[slices.IndexFunc(s, func(x uint32) bool { return x != 0 })] = 0 },
		"a row twice": func(s []uint32) {
			i := slices.Index(s, 0)
			s[i] = s[slices.IndexFunc(s, func(x uint32) bool { return x != 0 })]
		},
		"a row past the end": func(s []uint32) { s[slices.IndexFunc(s, func(x uint32) bool { return x != 0 })] |= ix.RowMask },
		// Every row once, but not where its key's hash leads (as
		// another program's hash would place them).
		"rows misplaced": func(s []uint32) { slices.Reverse(s) },
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			spoilt := SavedIndex{Slots: slices.Clone(ix.Slots), RowMask: ix.RowMask}
			spoil(spoilt.Slots)
			tb, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.ImportIndexed(snap, spoilt); !errors.Is(err, ErrIndex) || !errors.Is(err, ErrSnapshot) {
				t.Fatalf("ImportIndexed: %v, want ErrIndex", err)
			}
			if tb.Len() != 0 || tb.highWater != 0 {
				t.Fatalf("after the error the table holds %d rows", tb.Len())
			}
			if err := tb.ImportIndexed(snap, ix); err != nil {
				t.Fatal(err)
			}
			checkIndex(t, tb)
		})
	}
	// Another shape (another MaxRows gives another row mask): the index
	// is not used, and the rows are imported as ImportAnyOrder does.
	other, err := New(Config{Dim: 2, Rule: rule, MaxRows: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.ImportIndexed(snap, SavedIndex{Slots: ix.Slots, RowMask: ix.RowMask >> 1}); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, other)
	if !reflect.DeepEqual(other.Export(), restored) {
		t.Fatal("ImportIndexed with an index of another shape holds other rows")
	}
	// Freed rows: the table's order skips them, its index does not fit.
	src.Evict(step + 1000)
	push(src, step+1000, 10)
	if _, ok := src.FrozenShared(src.FrozenSize().Alloc()).InTableOrder().Index(); ok {
		t.Fatal("a cut of a table with freed rows offers its index")
	}
}

// BenchmarkRestoreTrained is a restore's import of a table trained as a job
// trains it (pushes of 1000 new keys: rows in insertion order, the index
// grown as they came), 1M rows of FTRL at dim 1, in the table's order:
// building the index from the keys (ImportAnyOrder, format 4) against
// taking the saved one (ImportIndexed, format 5). The copies' memory is
// fresh each time, as in a ps that starts.
func BenchmarkRestoreTrained(b *testing.B) {
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Dim: 1, Rule: rule}
	src, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys, grads := make([]uint64, 1000), make([]float32, 1000)
	for i := range grads {
		grads[i] = float32(rng.NormFloat64())
	}
	for step := int64(0); src.Len() < 1_000_000 || src.old.slots != nil; step++ {
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		if err := src.Push(keys, grads, step); err != nil {
			b.Fatal(err)
		}
	}
	cut := src.FrozenShared(src.FrozenSize().Alloc())
	view := cut.InTableOrder()
	ix, ok := view.Index()
	if !ok {
		b.Fatal("no index at the cut")
	}
	snap := view.Snapshot()
	for _, indexed := range []bool{false, true} {
		b.Run(map[bool]string{false: "build_index", true: "saved_index"}[indexed], func(b *testing.B) {
			b.SetBytes(int64(len(snap.Keys)) * 20)
			for range b.N {
				tb, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if indexed {
					err = tb.ImportIndexed(snap, ix)
				} else {
					err = tb.ImportAnyOrder(snap)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
