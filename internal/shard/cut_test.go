package shard

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// A Cut taken before pushes builds the checkpoint shard of the state at the
// cut, not of the state when Shard runs: the server takes the cut under its
// lock and encodes it while pushes go on.
func TestCutIsConsistent(t *testing.T) {
	layout := Layout{
		Vars:       []VarSpec{{Name: "w", Shape: []int64{4, 3}}},
		Tables:     []TableSpec{{Name: "emb", Dim: 2}},
		Optimizer:  optim.Config{Name: "adam", LearningRate: 0.1},
		NumWorkers: 1,
	}
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	rng := rand.New(rand.NewPCG(5, 6))
	if _, err := s.Init(layout, [][]float32{randFloats(rng, 12)}); err != nil {
		t.Fatal(err)
	}
	push := func() {
		keys := []uint64{rng.Uint64N(50), 50 + rng.Uint64N(50)}
		p := &Push{Worker: 0, Step: s.Step(),
			Dense:  []DenseGrad{{Name: []byte("w"), Values: randFloats(rng, 12), Bad: Unchecked}},
			Sparse: []SparseGrad{{Table: []byte("emb"), Keys: keys, Values: randFloats(rng, 4), Bad: Unchecked}}}
		if err := s.Check(p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		push()
	}
	want := s.Snapshot()
	cut := s.Cut()
	for range 10 {
		push()
	}
	if got := cut.Shard(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the cut's shard (step %d, %d tensors) differs from the snapshot taken at the cut (step %d)", got.Step, len(got.Tensors), want.Step)
	}
	if cut.Step() != want.Step || reflect.DeepEqual(s.Snapshot(), want) {
		t.Fatalf("cut step %d, snapshot step %d; or the state did not move on", cut.Step(), want.Step)
	}
}
