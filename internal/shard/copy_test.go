package shard

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// A copy decoded on another shard trains on bit for bit as the shard it
// came from, mid-step in sync mode included (the accumulated gradient and
// the workers counted so far travel with it), under its incarnation.
func TestCopyTrainsOnAsTheOriginal(t *testing.T) {
	for _, sync := range []bool{false, true} {
		l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{3, 4}}, {Name: "b", Shape: []int64{4}}},
			Optimizer: optim.Config{Name: "adam", LearningRate: 0.01}, NumWorkers: 2, Sync: sync}
		if sync {
			l.ReplicasToAggregate = 2
		}
		rng := rand.New(rand.NewPCG(3, 4))
		a := New(Config{NumWorkers: 2, Incarnation: func() uint64 { return 7 }})
		if _, err := a.Init(l, [][]float32{randFloats(rng, 12), randFloats(rng, 4)}); err != nil {
			t.Fatal(err)
		}
		push := func(s *Shard, w int, g [2][]float32) {
			t.Helper()
			p := &Push{Worker: w, Step: s.Step(), Dense: []DenseGrad{{Name: []byte("w"), Values: slices.Clone(g[0]), Bad: -1}, {Name: []byte("b"), Values: slices.Clone(g[1]), Bad: -1}}}
			if err := s.Check(p); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
				t.Fatal(err)
			}
		}
		grads := make([][2][]float32, 9)
		for i := range grads {
			grads[i] = [2][]float32{randFloats(rng, 12), randFloats(rng, 4)}
		}
		for i := range 5 { // sync: the fifth push leaves a step half done
			push(a, i%2, grads[i])
		}
		if _, err := a.Done(1); err != nil {
			t.Fatal(err)
		}
		enc, err := a.EncodeCopy()
		if err != nil {
			t.Fatal(err)
		}
		b := New(Config{NumWorkers: 2, Incarnation: func() uint64 { return 99 }})
		if err := b.DecodeCopy(enc, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if b.Incarnation() != 7 || b.Step() != a.Step() || !slices.Equal(b.DoneWorkers(), []int{1}) {
			t.Fatalf("sync %v: decoded incarnation %d step %d done %v, want 7, %d, [1]", sync, b.Incarnation(), b.Step(), b.DoneWorkers(), a.Step())
		}
		for i := 5; i < 9; i++ {
			push(a, i%2, grads[i])
			push(b, i%2, grads[i])
		}
		ea, _ := a.EncodeCopy()
		eb, _ := b.EncodeCopy()
		if !bytes.Equal(ea, eb) {
			t.Errorf("sync %v: after 4 more pushes the copy differs from the original", sync)
		}
		if err := b.DecodeCopy(enc[:len(enc)-3], time.Time{}); err == nil {
			t.Errorf("sync %v: a copy cut short was taken", sync)
		}
	}
}
