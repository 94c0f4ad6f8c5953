package sparse

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// FrozenIn into memory sized before the table changed (grew by new pages,
// evicted rows) exports what Frozen does; into memory of the table's
// size, the copy is that memory.
func TestFrozenInMemorySizedBefore(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(Config{Dim: 3, Rule: rule, EvictAfterSteps: 5})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	push := func(step int64, n int, keyRange uint64) {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64N(keyRange)
		}
		grads := make([]float32, 3*len(keys))
		for i := range grads {
			grads[i] = float32(rng.NormFloat64())
		}
		if err := tb.Push(keys, grads, step); err != nil {
			t.Fatal(err)
		}
	}
	for step := range int64(10) {
		push(step, 500, 1_000)
		tb.Evict(step)
	}
	same := tb.FrozenSize().Alloc()
	if f := tb.FrozenIn(same); !reflect.DeepEqual(f.Export(), tb.Export()) || &f.pages[0].data[0] != &same.pages[0].data[0] {
		t.Fatal("FrozenIn into memory of the table's size did not copy the table into that memory")
	}
	mem := tb.FrozenSize().Alloc()
	pagesBefore := len(mem.pages)
	for step := int64(10); step < 20; step++ { // more rows than the memory has room for
		push(step, 20_000, 1<<40)
		tb.Evict(step)
	}
	if len(tb.pages) <= pagesBefore {
		t.Fatalf("the table has %d pages, the memory %d: the test needs the table to grow", len(tb.pages), pagesBefore)
	}
	want := tb.Frozen().Export()
	frozen := tb.FrozenIn(mem)
	if got := frozen.Export(); !reflect.DeepEqual(got, want) {
		t.Fatalf("FrozenIn exports %d rows that differ from Frozen's %d", len(got.Keys), len(want.Keys))
	}
}
