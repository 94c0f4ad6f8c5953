package sparse

import (
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// FrozenChanges holds the rows created or changed since the last reset and
// the keys evicted, and a table that evicted more than it can remember says
// it does not know.
func TestFrozenChanges(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "ftrl", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(Config{Dim: 2, Rule: rule, EvictAfterSteps: 5})
	if err != nil {
		t.Fatal(err)
	}
	g := []float32{1, 1}
	for k := range uint64(100) {
		if err := tb.Push([]uint64{k}, g, 1); err != nil {
			t.Fatal(err)
		}
	}
	if tb.ChangesKnown() {
		t.Fatal("changes known before tracking was reset")
	}
	tb.ResetChanges()
	tb.Push([]uint64{3, 200}, []float32{1, 1, 1, 1}, 10) // a change and an admission
	tb.Pull([]uint64{201}, make([]float32, 2))           // an admission by a pull
	tb.Evict(10)                                         // rows touched at step 1 go
	rows, deleted, ok := tb.FrozenChanges()
	if !ok {
		t.Fatal("changes not known")
	}
	var keys []uint64
	for r := range rows.All() {
		keys = append(keys, r.Key)
	}
	slices.Sort(deleted)
	if !slices.Equal(keys, []uint64{3, 200, 201}) || len(deleted) != 99 || slices.Contains(deleted, 3) {
		t.Fatalf("changed rows %v, %d deleted (%v...)", keys, len(deleted), deleted[:3])
	}
	if n := tb.ChangedRows(); n != 0 {
		t.Fatalf("%d rows changed after FrozenChanges", n)
	}
	// More evictions than the list keeps: the changes are lost.
	for k := range uint64(maxDeletedFloor + 10) {
		tb.Push([]uint64{1000 + k}, g, 20)
	}
	tb.Evict(100)
	if _, _, ok := tb.FrozenChanges(); ok || tb.ChangesKnown() {
		t.Fatal("a table that evicted more than it remembers says it knows its changes")
	}
	tb.ResetChanges()
	if !tb.ChangesKnown() {
		t.Fatal("ResetChanges does not start a new interval")
	}
}
