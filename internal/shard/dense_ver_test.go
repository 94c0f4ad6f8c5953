package shard

import (
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
)

// Every writer of dense values moves their blocks past the version a
// worker holds: a push (the blocks its gradient may change) and a new
// state installed (a restore).
func TestDenseBlockVersions(t *testing.T) {
	n := 2*format.DenseBlock + 10 // 3 blocks
	l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{int64(n)}}, {Name: "b", Shape: []int64{1}}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}
	sh := New(Config{NumWorkers: 1})
	if _, err := sh.Init(l, [][]float32{make([]float32, n), {0}}); err != nil {
		t.Fatal(err)
	}
	if sh.DenseBlocks() != 4 {
		t.Fatalf("%d blocks, want 4", sh.DenseBlocks())
	}
	sel := make([]uint64, 1)
	changed := func(since uint64) uint64 {
		sh.DenseChangedSince(since, sel)
		return sel[0]
	}
	if changed(0) != 0b1111 {
		t.Fatalf("since 0: %b, want every block", sel[0])
	}
	v0 := sh.DenseVersion()
	if changed(v0) != 0 {
		t.Fatalf("nothing written: %b changed", sel[0])
	}
	// A gradient that is +0 but in w's middle block and b's.
	g := make([]float32, n)
	g[format.DenseBlock+3] = 1
	push := func(g, b []float32) {
		t.Helper()
		p := &Push{Dense: []DenseGrad{{Name: []byte("w"), Values: g, Bad: -1}, {Name: []byte("b"), Values: b, Bad: -1}}}
		if err := sh.Check(p); err != nil {
			t.Fatal(err)
		}
		if _, err := sh.Apply(p, time.Time{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	push(g, []float32{0})
	if changed(v0) != 0b0010 {
		t.Fatalf("after a push to w's block 1: %b changed, want 10", sel[0])
	}
	v1 := sh.DenseVersion()
	push(make([]float32, n), []float32{2})
	if changed(v1) != 0b1000 {
		t.Fatalf("after a push to b: %b changed, want 1000", sel[0])
	}
	v2 := sh.DenseVersion()
	st, err := Build(l, func(_ int, dst []float32) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	st.restored = 3
	sh.Install(st)
	if changed(v2) != 0b1111 {
		t.Fatalf("after an install: %b changed, want every block", sel[0])
	}
}
