package sparse

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeySetsAgainstReference runs pulls and pushes through a few key sets
// used again and again (so their remembered rows are reused, across
// evictions that free rows and checkpoint round trips that replace the
// table), some with repeated keys, and checks every answer, the stats and
// the final rows against the map-based reference: PushSet and PullSet are
// Push and Pull.
func TestKeySetsAgainstReference(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 500
	}
	configs := append(referenceConfigs(), Config{Dim: 700}) // more than a batch of values per row
	for _, rule := range testRules(t) {
		for ci, cfg := range configs {
			cfg.Rule = rule
			t.Run(fmt.Sprintf("%s/%d", rule.Name(), ci), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), 2))
				pool := keyPool(t, 150, 1<<14, uint64(ci))
				tb, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				ref := newRef(cfg)
				// Rows in pool order first, so that runs of the pool are runs
				// of rows (while no eviction has freed and reused them).
				grads := make([]float32, len(pool)*cfg.Dim)
				tb = runOp(t, tb, ref, op{kind: 'p', keys: pool, grads: grads})
				// The key sets: distinct keys of several sizes (one larger
				// than a batch), two with a key repeated, and runs of rows.
				sets := []*KeySet{NewKeySet(pool[10:50]), NewKeySet(pool)}
				for i, size := range []int{0, 1, 7, 40, 150, 9, 12} {
					perm := rng.Perm(len(pool))[:size]
					keys := make([]uint64, size)
					for j, p := range perm {
						keys[j] = pool[p]
					}
					if i >= 5 {
						keys[size-1] = keys[1]
					}
					sets = append(sets, NewKeySet(keys))
				}
				step := int64(0)
				for i := range n {
					ks := sets[rng.IntN(len(sets))]
					keys := ks.Keys()
					switch x := rng.IntN(100); {
					case x < 35:
						out := make([]float32, len(keys)*cfg.Dim)
						if err := tb.PullSet(ks, out); err != nil {
							t.Fatal(err)
						}
						if want := ref.pull(keys); !bitsEqual(out, want) {
							t.Fatalf("op %d: PullSet %v:\n got %v\nwant %v", i, keys, head(out), head(want))
						}
					case x < 92:
						step += int64(rng.IntN(3))
						grads := make([]float32, len(keys)*cfg.Dim)
						for j := range grads {
							grads[j] = float32(rng.NormFloat64())
						}
						if err := tb.PushSet(ks, grads, step); err != nil {
							t.Fatal(err)
						}
						ref.push(keys, grads, step)
					case x < 98:
						step += int64(rng.IntN(4))
						tb = runOp(t, tb, ref, op{kind: 'e', step: step})
					default:
						tb = runOp(t, tb, ref, op{kind: 'x'})
					}
					if got, want := statsOf(tb.Stats()), ref.statsNow(); got != want {
						t.Fatalf("op %d: stats\n got %+v\nwant %+v", i, got, want)
					}
					if i%97 == 0 {
						checkSame(t, tb, ref)
					}
				}
				checkSame(t, tb, ref)
			})
		}
	}
}

// A key set notices that its rows were freed and given to other keys.
func TestKeySetAfterEviction(t *testing.T) {
	tb, err := New(Config{Dim: 1, Rule: mustRule(t, "sgd"), EvictAfterSteps: 1})
	if err != nil {
		t.Fatal(err)
	}
	old := NewKeySet([]uint64{1, 2, 3})
	if err := tb.PushSet(old, []float32{1, 1, 1}, 1); err != nil {
		t.Fatal(err)
	}
	if n := tb.Evict(10); n != 3 {
		t.Fatalf("evicted %d rows, want 3", n)
	}
	// New keys take the freed rows.
	if err := tb.Push([]uint64{4, 5, 6}, []float32{2, 2, 2}, 10); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 3)
	if err := tb.PullSet(old, out); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0 || out[1] != 0 || out[2] != 0 {
		t.Fatalf("evicted keys read %v through their old rows, want fresh zeros", out)
	}
	if err := tb.Pull([]uint64{4, 5, 6}, out); err != nil {
		t.Fatal(err)
	}
	if want := float32(-0.1); out[0] != want || out[2] != want {
		t.Fatalf("keys 4..6 read %v, want %v each", out, want)
	}
}

func TestKeySetShapeErrors(t *testing.T) {
	tb, _ := New(Config{Dim: 2, Rule: mustRule(t, "sgd")})
	ks := NewKeySet([]uint64{1, 2})
	if err := tb.PushSet(ks, make([]float32, 3), 0); err == nil {
		t.Error("PushSet with 3 floats for 2 keys of dim 2 succeeded")
	}
	if err := tb.PullSet(ks, make([]float32, 5)); err == nil {
		t.Error("PullSet with 5 floats for 2 keys of dim 2 succeeded")
	}
}

// BenchmarkPushSet pushes the same 100k keys of a 1M-row table again and
// again (their rows remembered), with SGD, FTRL and Adam (which keeps an
// update count per row), to compare with BenchmarkPush: random keys
// of the table, and the first keys it was filled with (rows in order, as
// keys first seen together get them).
func BenchmarkPushSet(b *testing.B) {
	for _, order := range []string{"random", "inorder"} {
		for _, rule := range []string{"sgd", "ftrl", "adam"} {
			for _, dim := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/dim=%d", order, rule, dim), func(b *testing.B) {
					benchPushSet(b, order == "inorder", rule, dim)
				})
			}
		}
	}
}

func benchPushSet(b *testing.B, inOrder bool, rule string, dim int) {
	tb, _ := New(Config{Dim: dim, Rule: mustRule(b, rule), EvictAfterSteps: 1000})
	keys := fill(b, tb, benchRows)
	ks := NewKeySet(keys[:benchBatch])
	if !inOrder {
		ks = NewKeySet(batches(keys, benchBatch, 1)[0])
	}
	grads := make([]float32, benchBatch*dim)
	for i := range grads {
		grads[i] = float32(i%7) * 0.01
	}
	i := 0
	cpu0 := cpuNow()
	for b.Loop() {
		if err := tb.PushSet(ks, grads, int64(i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportKeys(b, i)
	reportCPU(b, cpu0, i)
}

// BenchmarkPullSet is BenchmarkPull with the rows remembered.
func BenchmarkPullSet(b *testing.B) {
	for _, order := range []string{"random", "inorder"} {
		for _, dim := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/dim=%d", order, dim), func(b *testing.B) {
				benchPullSet(b, order == "inorder", dim)
			})
		}
	}
}

func benchPullSet(b *testing.B, inOrder bool, dim int) {
	tb, _ := New(Config{Dim: dim, Rule: mustRule(b, "ftrl")})
	keys := fill(b, tb, benchRows)
	ks := NewKeySet(keys[:benchBatch])
	if !inOrder {
		ks = NewKeySet(batches(keys, benchBatch, 1)[0])
	}
	out := make([]float32, benchBatch*dim)
	i := 0
	cpu0 := cpuNow()
	for b.Loop() {
		if err := tb.PullSet(ks, out); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportKeys(b, i)
	reportCPU(b, cpu0, i)
}

// BenchmarkCheckPushSet is BenchmarkPushSet's check (the trial on copies
// that a push goes through first), for the rules that take it.
func BenchmarkCheckPushSet(b *testing.B) {
	for _, rule := range []string{"ftrl", "adam"} {
		for _, dim := range []int{1, 8} {
			b.Run(fmt.Sprintf("random/%s/dim=%d", rule, dim), func(b *testing.B) {
				tb, _ := New(Config{Dim: dim, Rule: mustRule(b, rule)})
				keys := fill(b, tb, benchRows)
				ks := NewKeySet(batches(keys, benchBatch, 1)[0])
				if err := tb.PullSet(ks, make([]float32, benchBatch*dim)); err != nil { // the rows remembered
					b.Fatal(err)
				}
				grads := make([]float32, benchBatch*dim)
				for i := range grads {
					grads[i] = float32(i%7) * 0.01
				}
				i := 0
				cpu0 := cpuNow()
				for b.Loop() {
					if err := tb.CheckPushSet(ks, grads); err != nil {
						b.Fatal(err)
					}
					i++
				}
				reportKeys(b, i)
				reportCPU(b, cpu0, i)
			})
		}
	}
}
