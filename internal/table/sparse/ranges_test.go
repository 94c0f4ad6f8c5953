package sparse

import (
	"math"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// Ranges holds every value and state of the rows in memory, exactly, and
// says false once one is not finite.
func TestRanges(t *testing.T) {
	tb, err := New(Config{Dim: 2, Rule: mustRule(t, "adagrad")})
	if err != nil {
		t.Fatal(err)
	}
	if p, st, ok := tb.Ranges(); !ok || p != (optim.Range{}) || len(st) != 1 || st[0] != (optim.Range{}) {
		t.Fatalf("empty table: %v %v %v, want empty ranges", p, st, ok)
	}
	if err := tb.Push([]uint64{1, 2}, []float32{1, -3, 0.5, 2}, 1); err != nil {
		t.Fatal(err)
	}
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	slo, shi := lo, hi
	for r := range tb.All() {
		for _, x := range r.Value {
			lo, hi = min(lo, x), max(hi, x)
		}
		for _, x := range r.State[0] {
			slo, shi = min(slo, x), max(shi, x)
		}
	}
	p, st, ok := tb.Ranges()
	if !ok || p != (optim.Range{Lo: float64(lo), Hi: float64(hi)}) || st[0] != (optim.Range{Lo: float64(slo), Hi: float64(shi)}) {
		t.Fatalf("ranges %v %v %v, want [%v %v] [%v %v]", p, st, ok, lo, hi, slo, shi)
	}
	if err := tb.Push([]uint64{2}, []float32{float32(math.Inf(1)), 0}, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := tb.Ranges(); ok {
		t.Fatal("a row holding NaN or Inf: Ranges says ok")
	}
}

// A key set is Resolved once each key has a row of the table and no two
// share one; a key without a row (not admitted yet), a repeated key, another
// table or an eviction undo it.
func TestResolved(t *testing.T) {
	tb, err := New(Config{Dim: 1, Rule: mustRule(t, "sgd"), MinCount: 2, SketchWidth: 1 << 10, EvictAfterSteps: 1})
	if err != nil {
		t.Fatal(err)
	}
	ks, dup := NewKeySet([]uint64{1, 2}), NewKeySet([]uint64{1, 2, 1})
	for i, want := range []bool{false, true} { // admitted at the second sighting
		if err := tb.PushSet(ks, []float32{1, 1}, 1); err != nil {
			t.Fatal(err)
		}
		if got := ks.Resolved(tb); got != want {
			t.Fatalf("after push %d: Resolved %v, want %v", i+1, got, want)
		}
	}
	if err := tb.PushSet(dup, []float32{1, 1, 1}, 1); err != nil {
		t.Fatal(err)
	}
	if dup.Resolved(tb) {
		t.Fatal("a set with a key twice is Resolved")
	}
	other, _ := New(Config{Dim: 1, Rule: mustRule(t, "sgd")})
	if ks.Resolved(other) {
		t.Fatal("Resolved for a table the set was never used with")
	}
	tb.Evict(10)
	if ks.Resolved(tb) {
		t.Fatal("Resolved after an eviction freed its rows")
	}
}

// markDirty sets exactly the bits lo..hi-1, a word at a time.
func TestMarkDirty(t *testing.T) {
	for lo := 0; lo < 200; lo += 7 {
		for hi := lo; hi < 260; hi += 5 {
			got, want := make([]uint64, 5), make([]uint64, 5)
			got[0], want[0] = 1<<63, 1<<63 // bits already set stay set
			markDirty(got, lo, hi)
			for o := lo; o < hi; o++ {
				want[o>>6] |= 1 << (o & 63)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("markDirty(%d, %d): word %d = %#x, want %#x", lo, hi, i, got[i], want[i])
				}
			}
		}
	}
}
