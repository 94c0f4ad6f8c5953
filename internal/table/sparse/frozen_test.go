package sparse

import (
	"math/rand/v2"
	"reflect"
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
