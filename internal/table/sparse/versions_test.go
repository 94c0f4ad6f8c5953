package sparse

import (
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// ChangedSince marks exactly the keys whose value may differ from what a
// reader read at an earlier version: pushed rows, rows evicted while the
// key can get no row back (the table is full), every key after an Import,
// and the keys the reader lacks; an unchanged row or a row Pull created
// (which holds the initial value read before) is not marked.
func TestChangedSince(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "sgd", LearningRate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(Config{Dim: 1, Rule: rule, Init: RandomNormal{Stddev: 1, Seed: 3}, EvictAfterSteps: 5, MaxRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	tb.EnableVersions()
	out := make([]float32, 4)
	read := func(keys ...uint64) *KeySet {
		ks := NewKeySet(keys)
		if err := tb.PullSet(ks, out[:len(keys)]); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	changed := func(ks *KeySet, since uint64, lack []uint64) uint64 {
		t.Helper()
		sel := make([]uint64, 1)
		if _, err := tb.ChangedSince(ks, since, lack, sel); err != nil {
			t.Fatal(err)
		}
		return sel[0]
	}
	read(1, 2, 3)
	v0 := tb.Version()
	if err := tb.Push([]uint64{2}, []float32{1}, 1); err != nil {
		t.Fatal(err)
	}
	if got := changed(read(1, 2, 3), v0, nil); got != 0b010 {
		t.Errorf("after a push to key 2: marked %03b, want 010", got)
	}
	if got := changed(read(1, 2, 3), v0, []uint64{0b100}); got != 0b110 {
		t.Errorf("with key 3 lacked: marked %03b, want 110", got)
	}
	v1 := tb.Version()
	if got := changed(read(1, 2, 3), v1, nil); got != 0 {
		t.Errorf("nothing changed since: marked %03b, want 000", got)
	}
	// Evict key 2 (touched at step 1), keep 1 and 3 by pushing them; fill
	// the freed row with key 4, so key 2 gets no row back.
	if err := tb.Push([]uint64{1, 3}, []float32{0, 0}, 7); err != nil {
		t.Fatal(err)
	}
	v2 := tb.Version()
	if n := tb.Evict(7); n != 1 {
		t.Fatalf("evicted %d rows, want 1", n)
	}
	read(4)
	if got := changed(read(1, 2, 3), v2, nil); got != 0b010 {
		t.Errorf("after key 2 was evicted: marked %03b, want 010", got)
	}
	v3 := tb.Version()
	if got := changed(read(1, 2, 3), v3, nil); got != 0 {
		t.Errorf("nothing changed since the eviction: marked %03b, want 000", got)
	}
	if err := tb.Import(Snapshot{Dim: 1, Keys: []uint64{1}, Values: []float32{5}}); err != nil {
		t.Fatal(err)
	}
	if got := changed(read(1, 2, 3), v3, nil); got != 0b111 {
		t.Errorf("after an Import: marked %03b, want 111", got)
	}
}
