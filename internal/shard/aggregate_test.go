package shard

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// TestApplyAggregateMatchesThePrimary: a backup fed only the primary's
// per-step aggregates holds the primary's bytes (Adam, so optimizer state
// and update counts count too), step by step.
func TestApplyAggregateMatchesThePrimary(t *testing.T) {
	l := Layout{
		Vars:      []VarSpec{{Name: "w", Shape: []int64{3}}, {Name: "b", Shape: []int64{1}}},
		Optimizer: optim.Config{Name: "adam", LearningRate: 0.1},
		Sync:      true, ReplicasToAggregate: 2, NumWorkers: 2,
	}
	init := [][]float32{{1, 2, 3}, {0.5}}
	type agg struct {
		step  int64
		grads [][]float32
	}
	var shipped []agg
	primary := New(Config{NumWorkers: 2, Aggregated: func(step int64, grads [][]float32, _ []RowGrads) {
		c := agg{step: step}
		for _, g := range grads {
			c.grads = append(c.grads, append([]float32(nil), g...))
		}
		shipped = append(shipped, c)
	}})
	backup := New(Config{NumWorkers: 2})
	for _, sh := range []*Shard{primary, backup} {
		if _, err := sh.Init(l, init); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for step := int64(0); step < 6; step++ {
		for w := 0; w < 2; w++ {
			f := float32(w+1) * (float32(step) + 0.3)
			p := Push{Worker: w, Step: step, Dense: []DenseGrad{
				{Name: []byte("w"), Values: []float32{f, -f / 3, 0.1}, Bad: Unchecked},
				{Name: []byte("b"), Values: []float32{f * f}, Bad: Unchecked},
			}}
			if err := primary.Check(&p); err != nil {
				t.Fatal(err)
			}
			if _, err := primary.Apply(&p, now, nil); err != nil {
				t.Fatal(err)
			}
		}
		if len(shipped) != 1 || shipped[0].step != step {
			t.Fatalf("step %d: aggregates reported %+v, want one of step %d", step, shipped, step)
		}
		if err := backup.ApplyAggregate(shipped[0].step, shipped[0].grads, nil); err != nil {
			t.Fatal(err)
		}
		shipped = nil
		if backup.Step() != primary.Step() {
			t.Fatalf("backup at step %d, primary at %d", backup.Step(), primary.Step())
		}
		for i, v := range primary.Vars() {
			bv := backup.Vars()[i]
			for j := range v.value {
				if math.Float32bits(v.value[j]) != math.Float32bits(bv.value[j]) {
					t.Fatalf("step %d: %s[%d] = %v on the backup, %v on the primary", step, v.name, j, bv.value[j], v.value[j])
				}
			}
			for k := range v.state {
				for j := range v.state[k] {
					if math.Float32bits(v.state[k][j]) != math.Float32bits(bv.state[k][j]) {
						t.Fatalf("step %d: %s state %d differs", step, v.name, k)
					}
				}
			}
		}
	}
	for _, tc := range []struct {
		step  int64
		grads [][]float32
		want  string
	}{
		{5, [][]float32{{1, 1, 1}, {1}}, "an aggregate of step 5, but this copy is at step 6"},
		{6, [][]float32{{1, 1, 1}}, "an aggregate of 1 variables, this shard holds 2"},
		{6, [][]float32{{1, 1}, {1}}, `aggregate of "w" has 2 values, want 3`},
	} {
		if err := backup.ApplyAggregate(tc.step, tc.grads, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ApplyAggregate(%d, %v) = %v, want an error containing %q", tc.step, tc.grads, err, tc.want)
		}
	}
	async := New(Config{NumWorkers: 1})
	if _, err := async.Init(Layout{Vars: l.Vars, Optimizer: l.Optimizer, NumWorkers: 1}, init); err != nil {
		t.Fatal(err)
	}
	if err := async.ApplyAggregate(0, init, nil); err == nil || !strings.Contains(err.Error(), "sync mode only") {
		t.Errorf("ApplyAggregate on an async shard = %v, want a refusal", err)
	}
}
