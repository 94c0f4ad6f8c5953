package trainer

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// A standalone push of the keys it last pulled reuses the rows the pull
// found (as a ps does with a worker's cached key set) and gives bit for bit
// what looking every key up again gives, with rows admitted on a second
// touch and keys that change from batch to batch.
func TestLocalPSReusesPulledKeys(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Config: lifecycle.Config{Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.2}}}
	cfg.defaults()
	tables := []model.Table{{Name: "w", Dim: 3, Init: "normal", InitStddev: 0.1, Seed: 5, MinCount: 2}}
	newPS := func() *localPS {
		p, err := newLocalPS(cfg, nil, tables, model.Params{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	reuse, lookup := newPS(), newPS()
	rng := rand.New(rand.NewPCG(1, 2))
	batch := func() []uint64 {
		keys := make([]uint64, 0, 40)
		for len(keys) < cap(keys) {
			if k := rng.Uint64N(60); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return keys
	}
	keys := batch()
	pull := func(p *localPS, keys []uint64) []float32 {
		rows := []client.Rows{{Table: "w", Keys: keys, Values: make([]float32, 3*len(keys))}}
		if call := p.Do(ctx, &client.Request{Pull: true, SparseParams: rows}); call.Err != nil {
			t.Fatal(call.Err)
		}
		return rows[0].Values
	}
	if got, want := pull(reuse, keys), pull(lookup, keys); !slices.Equal(got, want) {
		t.Fatalf("first pull: %v, want %v", got, want)
	}
	const steps = 30
	for step := range int64(steps) {
		grads := make([]float32, 3*len(keys))
		for i := range grads {
			grads[i] = float32(rng.NormFloat64())
		}
		next := batch()
		exchange := func(p *localPS, forget bool) []float32 {
			if forget {
				clear(p.pulled)
			}
			rows := []client.Rows{{Table: "w", Keys: next, Values: make([]float32, 3*len(next))}}
			call := p.Do(ctx, &client.Request{
				Push: true, Step: step, SparseGrads: []client.Rows{{Table: "w", Keys: keys, Values: grads}},
				Pull: true, SparseParams: rows,
			})
			if call.Err != nil {
				t.Fatal(call.Err)
			}
			return rows[0].Values
		}
		if got, want := exchange(reuse, false), exchange(lookup, true); !slices.Equal(got, want) {
			t.Fatalf("step %d: rows after a push through the pulled key set\n%v\nwant (every key looked up)\n%v", step, got, want)
		}
		keys = next
	}
	if reuse.reused != steps || lookup.reused != 0 {
		t.Errorf("pushes through the pulled key set: %d and %d, want %d and 0", reuse.reused, lookup.reused, steps)
	}
	// A push of other keys than the last pull's looks them up.
	before := reuse.reused
	other := []uint64{1000, 1001}
	if call := reuse.Do(ctx, &client.Request{Push: true, Step: steps, SparseGrads: []client.Rows{{Table: "w", Keys: other, Values: make([]float32, 6)}}}); call.Err != nil {
		t.Fatal(call.Err)
	}
	if reuse.reused != before {
		t.Errorf("a push of keys not pulled went through the pulled key set")
	}
}
