package sparse

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// CheckPush finds the row a push would make infinite, a key given twice
// counted twice and a new key tried on the row it would get, and changes
// nothing; a push it passes stays finite when applied.
func TestCheckPush(t *testing.T) {
	for _, rule := range []string{"sgd", "momentum", "adagrad", "adam", "ftrl"} {
		t.Run(rule, func(t *testing.T) {
			r, err := optim.New(optim.Config{Name: rule, LearningRate: 1})
			if err != nil {
				t.Fatal(err)
			}
			tab, err := New(Config{Dim: 2, Rule: r, Init: RandomUniform{Min: -1, Max: 1, Seed: 3}})
			if err != nil {
				t.Fatal(err)
			}
			if err := tab.Push([]uint64{5}, []float32{1, -1}, 1); err != nil {
				t.Fatal(err)
			}
			before := tab.Export()
			var refused error
			for step := int64(2); step < 200 && refused == nil; step++ {
				keys := []uint64{5, 9, 5} // 5 twice; 9 new at first
				grads := []float32{0, 2e38, 0, 1, 0, 2e38}
				refused = tab.CheckPush(keys, grads)
				if refused == nil {
					if err := tab.Push(keys, grads, step); err != nil {
						t.Fatal(err)
					}
					for row := range tab.All() {
						for _, x := range row.Value {
							if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
								t.Fatalf("step %d: a checked push made key %d %v", step, row.Key, row.Value)
							}
						}
					}
					before = tab.Export()
				}
			}
			if rule == "sgd" && refused == nil {
				t.Fatal("sgd: two pushes of 2e38 to one key were never refused")
			}
			if refused == nil {
				return
			}
			if !errors.Is(refused, ErrNotFinite) {
				t.Fatalf("CheckPush: %v, want ErrNotFinite", refused)
			}
			after := tab.Export()
			if len(after.Keys) != len(before.Keys) || !equalBits(after.Values, before.Values) {
				t.Fatalf("CheckPush changed the table: %v -> %v", before, after)
			}
		})
	}
}

// The rows a push has not created yet are tried on what they would start
// from, and the table does not grow.
func TestCheckPushNewRows(t *testing.T) {
	r, _ := optim.New(optim.Config{Name: "sgd", LearningRate: 1})
	tab, err := New(Config{Dim: 1, Rule: r, Init: RandomUniform{Min: -1, Max: 1, Seed: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.CheckPush([]uint64{1, 1}, []float32{3e38, 3e38}); !errors.Is(err, ErrNotFinite) {
		t.Fatalf("a new key pushed 3e38 twice: %v, want ErrNotFinite", err)
	}
	if err := tab.CheckPush([]uint64{1, 2}, []float32{3e38, 3e38}); err != nil {
		t.Fatalf("two new keys pushed 3e38 once each: %v", err)
	}
	if tab.Len() != 0 {
		t.Fatalf("CheckPush made %d rows", tab.Len())
	}
	if err := tab.CheckPush([]uint64{1}, []float32{1, 2}); !errors.Is(err, ErrShape) {
		t.Fatalf("a gradient of the wrong length: %v, want ErrShape", err)
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// CheckPushSet, through a key set's remembered rows, refuses exactly the
// pushes CheckPush refuses, changes no row, and a push it passes stays
// finite: over key sets used again (batched), with keys given twice (not
// batched), new keys, evictions (a new Gen) and gradients that overflow.
func TestCheckPushSetIsCheckPush(t *testing.T) {
	for _, rule := range []string{"sgd", "adagrad", "adam", "ftrl"} {
		for _, dim := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/dim=%d", rule, dim), func(t *testing.T) {
				r, err := optim.New(optim.Config{Name: rule, LearningRate: 1})
				if err != nil {
					t.Fatal(err)
				}
				tab, err := New(Config{Dim: dim, Rule: r, Init: RandomUniform{Min: -1, Max: 1, Seed: 3}, EvictAfterSteps: 50})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(dim), 9))
				var sets []*KeySet
				for range 4 {
					keys := make([]uint64, 200+rng.IntN(300))
					for i := range keys {
						keys[i] = uint64(rng.IntN(2000))
					}
					if rng.IntN(2) == 0 { // distinct keys: the batched path
						seen := map[uint64]bool{}
						keys = keys[:0]
						for len(keys) < 300 {
							if k := uint64(rng.IntN(2000)); !seen[k] {
								seen[k] = true
								keys = append(keys, k)
							}
						}
					}
					sets = append(sets, NewKeySet(keys))
				}
				refused := 0
				for step := int64(1); step <= 300; step++ {
					ks := sets[rng.IntN(len(sets))]
					grads := make([]float32, ks.Len()*dim)
					for i := range grads {
						grads[i] = float32(rng.NormFloat64())
					}
					switch rng.IntN(8) {
					case 0: // one huge gradient: overflows some rules' state
						grads[rng.IntN(len(grads))] = 3e38
					case 1: // all huge: a second such push overflows sgd's values
						for i := range grads {
							grads[i] = 2e38
						}
					}
					before := tab.Export()
					want := tab.CheckPush(ks.Keys(), grads)
					got := tab.CheckPushSet(ks, grads)
					if (want == nil) != (got == nil) || (got != nil && !errors.Is(got, ErrNotFinite)) {
						t.Fatalf("step %d: CheckPush %v, CheckPushSet %v", step, want, got)
					}
					if !reflect.DeepEqual(before, tab.Export()) {
						t.Fatalf("step %d: CheckPushSet changed the table", step)
					}
					if got != nil {
						refused++
						continue
					}
					if err := tab.PushSet(ks, grads, step); err != nil {
						t.Fatal(err)
					}
					for row := range tab.All() {
						for _, x := range row.Value {
							if notFinite(x) {
								t.Fatalf("step %d: a checked push made key %d %v", step, row.Key, x)
							}
						}
					}
					if step%60 == 0 {
						tab.Evict(step) // frees rows: a new Gen, the sets look their keys up again
					}
				}
				t.Logf("%d of 300 pushes refused", refused)
			})
		}
	}
}

// TestCheckPushBatchedIsEach: CheckPush of distinct keys, tried in batches,
// refuses exactly the pushes that trying each key's row on its own
// (checkEach, the path of repeated keys and of rules that keep update
// counts) refuses, naming the same key, over rows with state, new keys
// (their initial value and state) and gradients that overflow.
func TestCheckPushBatchedIsEach(t *testing.T) {
	for _, rule := range []string{"sgd", "adagrad", "ftrl", "rmsprop", "adam", "adamw"} {
		for _, dim := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/dim=%d", rule, dim), func(t *testing.T) {
				r, err := optim.New(optim.Config{Name: rule, LearningRate: 1})
				if err != nil {
					t.Fatal(err)
				}
				tab, err := New(Config{Dim: dim, Rule: r, Init: RandomUniform{Min: -1, Max: 1, Seed: 5}})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(dim), 11))
				refused := 0
				for step := int64(1); step <= 200; step++ {
					keys := rng.Perm(3000)[:100+rng.IntN(1500)]
					ks := make([]uint64, len(keys))
					for i, k := range keys {
						ks[i] = uint64(k)
					}
					grads := make([]float32, len(ks)*dim)
					for i := range grads {
						grads[i] = float32(rng.NormFloat64())
					}
					switch rng.IntN(4) {
					case 0: // one huge gradient: overflows some rules' state
						grads[rng.IntN(len(grads))] = 3e38
					case 1: // all huge: a second such push overflows sgd's values
						for i := range grads {
							grads[i] = 2e38
						}
					}
					got := tab.CheckPush(ks, grads)
					tab.distinctKeys(ks)
					want := tab.checkEach(ks, grads)
					if tab.keepCount && got != nil {
						// Rows of several update counts: the message's value
						// is the first in row order, as checkEach's.
						if got.Error() != want.Error() {
							t.Fatalf("step %d: batched %v, each %v", step, got, want)
						}
					}
					if (want == nil) != (got == nil) || (got != nil && !strings.HasPrefix(got.Error(), strings.Split(want.Error(), " would")[0])) {
						t.Fatalf("step %d: batched %v, each %v", step, got, want)
					}
					if got != nil {
						refused++
						continue
					}
					if err := tab.Push(ks, grads, step); err != nil {
						t.Fatal(err)
					}
				}
				if refused == 0 {
					t.Error("no push refused")
				}
			})
		}
	}
}
