package sparse

import (
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// ColdestFrom takes distinct live rows, the coldest part of the table
// first, and goes on round the table from call to call.
func TestColdestFrom(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "sgd", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(Config{Dim: 2, Rule: rule})
	if err != nil {
		t.Fatal(err)
	}
	tb.KeepTouch()
	// The row of rank r is key r*7919%rows, last touched at step r/10:
	// the order of the rows in the table is not their coldness's.
	const rows = 10000
	rankOf := map[uint64]uint64{}
	for k := range uint64(rows) { // rows in key order
		if err := tb.Push([]uint64{k}, []float32{1, 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for r := range uint64(rows) { // touched in rank order
		k := r * 7919 % rows
		rankOf[k] = r
		if err := tb.Push([]uint64{k}, []float32{1, 1}, int64(r/10)); err != nil {
			t.Fatal(err)
		}
	}
	rank := func(k uint64) uint64 { return rankOf[k] }
	// Free some slots, so that the scan meets rows not live.
	tb.Take([]uint64{5, 500, 5000})
	var h ColdHand
	seen := map[uint64]bool{}
	for call := range 20 {
		got := tb.ColdestFrom(&h, 100, nil)
		if len(got) != 100 {
			t.Fatalf("call %d: %d keys, want 100", call, len(got))
		}
		for _, k := range got {
			if seen[k] || !tb.Has(k) {
				t.Fatalf("call %d: key %d taken twice or not in the table", call, k)
			}
			seen[k] = true
			// 2n/live is 2%: the scan takes rows among the coldest
			// 200 left (the call*100 taken before were colder), with
			// the sample's error.
			if rank(k) >= uint64(call*100+400) {
				t.Fatalf("call %d: key %d, touched at step %d: not among the coldest", call, k, rank(k)/10)
			}
		}
		tb.Take(got)
	}
	// Asked for more than the cold rows, it takes any.
	got := tb.ColdestFrom(&h, tb.Len()-1, nil)
	slices.Sort(got)
	if len(got) != tb.Len()-1 || len(slices.Compact(got)) != len(got) {
		t.Fatalf("%d keys (distinct: %d), want %d", len(got), len(slices.Compact(got)), tb.Len()-1)
	}
}

// SmallPages makes an empty table's pages 1024 rows, so that a table of
// 9,000 rows holds memory for 9,216, not two pages of 8,192; a table
// holding rows keeps its pages.
func TestSmallPages(t *testing.T) {
	rule, err := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	capacity := func(tb *Table) (n int) {
		for _, p := range tb.pages {
			n += len(p.keys)
		}
		return n
	}
	grow := func(tb *Table, rows int) {
		for k := range uint64(rows) {
			if err := tb.Push([]uint64{k}, make([]float32, 8), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	small, _ := New(Config{Dim: 8, Rule: rule})
	small.SmallPages()
	grow(small, 9000)
	if c := capacity(small); c > 9216 {
		t.Errorf("9000 rows in pages of %d rows, want at most 9216", c)
	}
	large, _ := New(Config{Dim: 8, Rule: rule})
	grow(large, 9000)
	if c := capacity(large); c < 2<<maxPageShift {
		t.Errorf("without SmallPages, pages of %d rows, want %d (else this test shows nothing)", c, 2<<maxPageShift)
	}
	large.SmallPages() // holds rows: no change
	if large.pageShift != maxPageShift {
		t.Errorf("SmallPages on a table with rows: page shift %d, want %d", large.pageShift, maxPageShift)
	}
	grow(small, 20000)
	for k := range uint64(20000) {
		if !small.Has(k) {
			t.Fatalf("key %d lost", k)
		}
	}
}
