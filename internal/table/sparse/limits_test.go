package sparse

import (
	"errors"
	"fmt"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// TestNewAtLimits: every documented limit is accepted exactly at its value
// and refused one past it. The values are written out rather than taken
// from the constants, so that a changed constant fails too: row ids are 31
// bits, sketch counters one byte.
func TestNewAtLimits(t *testing.T) {
	rule := plainRule{0}
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Dim: 1 << 16, Rule: rule}, true},
		{Config{Dim: 1<<16 + 1, Rule: rule}, false},
		{Config{Dim: 1, Rule: rule, MinCount: 255, SketchWidth: 64}, true},
		{Config{Dim: 1, Rule: rule, MinCount: 256, SketchWidth: 64}, false},
		// MinCount 0: no sketch is allocated, whatever its width.
		{Config{Dim: 1, Rule: rule, SketchWidth: 1 << 30}, true},
		{Config{Dim: 1, Rule: rule, SketchWidth: 1<<30 + 1}, false},
		{Config{Dim: 1, Rule: rule, MaxRows: 1<<31 - 1}, true},
		{Config{Dim: 1, Rule: rule, MaxRows: 1 << 31}, false},
	} {
		_, err := New(tc.cfg)
		if tc.ok && err != nil {
			t.Errorf("New(%+v) = %v, want no error", tc.cfg, err)
		}
		if !tc.ok && !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", tc.cfg, err)
		}
	}
}

// TestPushSetUnadmittedKeys: a key set whose keys are partly not admitted
// yet takes the batched path with gathered gradients; each admitted key
// must get its own gradient, for one value per row and for several. With
// SGD (lr 0.5) from zero rows the result is computed by hand: a row is
// -0.5 times the sum of the gradients pushed to it once admitted.
func TestPushSetUnadmittedKeys(t *testing.T) {
	sgd, err := optim.New(optim.Config{Name: "sgd", LearningRate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	adagrad, err := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []optim.Rule{sgd, adagrad} {
		for _, dim := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/dim%d", rule.Name(), dim), func(t *testing.T) {
				cfg := Config{Dim: dim, Rule: rule, MinCount: 2, SketchWidth: 1 << 12}
				set, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				plain, _ := New(cfg)
				old := []uint64{11, 12, 13}
				for range 2 { // two sightings: admitted
					out := make([]float32, len(old)*dim)
					set.Pull(old, out)
					plain.Pull(old, out)
				}
				// New keys between the admitted ones, first not admitted.
				keys := []uint64{11, 101, 12, 102, 13}
				ks := NewKeySet(keys)
				grads := func(round int) []float32 {
					g := make([]float32, len(keys)*dim)
					for i := range g {
						g[i] = float32(round*100 + i + 1)
					}
					return g
				}
				for round := range 2 {
					g := grads(round)
					if err := set.PushSet(ks, g, 1); err != nil {
						t.Fatal(err)
					}
					if err := plain.Push(keys, g, 1); err != nil {
						t.Fatal(err)
					}
				}
				if d := diffSnapshots(set.Export(), plain.Export()); d != "" {
					t.Fatalf("PushSet and Push differ: %s", d)
				}
				if got, want := set.Stats().RejectedPushes, int64(2); got != want {
					t.Errorf("RejectedPushes = %d, want %d (keys 101, 102 in the first round)", got, want)
				}
				if rule != sgd {
					return
				}
				g0, g1 := grads(0), grads(1)
				out := make([]float32, len(keys)*dim)
				set.Pull(keys, out)
				for i, k := range keys {
					for j := range dim {
						x := i*dim + j
						want := -0.5 * g1[x]
						if k < 100 { // admitted before the first round
							want -= 0.5 * g0[x]
						}
						if out[x] != want {
							t.Errorf("key %d value %d = %v, want %v", k, j, out[x], want)
						}
					}
				}
			})
		}
	}
}
