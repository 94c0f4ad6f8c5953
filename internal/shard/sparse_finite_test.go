package shard

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

func sparseLayout(sync bool, workers int) Layout {
	return Layout{
		Vars:       []VarSpec{{Name: "w", Shape: []int64{1}}},
		Tables:     []TableSpec{{Name: "emb", Dim: 2}},
		Optimizer:  optim.Config{Name: "sgd", LearningRate: 1},
		NumWorkers: workers, Sync: sync, ReplicasToAggregate: workers,
	}
}

func sparsePush(worker int, step int64, keys []uint64, rows ...float32) *Push {
	return &Push{Worker: worker, Step: step,
		Dense:  []DenseGrad{{Name: []byte("w"), Values: []float32{1}, Bad: Unchecked}},
		Sparse: []SparseGrad{{Table: []byte("emb"), Keys: keys, Values: rows, Bad: Unchecked}}}
}

func rowsOf(t *testing.T, s *Shard, keys ...uint64) []float32 {
	t.Helper()
	out := make([]float32, 2*len(keys))
	if err := s.PullRows([]byte("emb"), keys, nil, false, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// An asynchronous push whose sparse rows would not be finite is refused
// whole: no row, no dense value, no step changes, and the error names the
// table and the key (before, 3e38 pushed twice to a row made it -Inf).
func TestNonFiniteSparseRefusedAsync(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	if _, err := s.Init(sparseLayout(false, 1), [][]float32{{0}}); err != nil {
		t.Fatal(err)
	}
	var refused error
	var step int64
	for ; step < 10 && refused == nil; step++ {
		p := sparsePush(0, step, []uint64{7, 8}, 3e38, 1, 1, 1)
		if err := s.Check(p); err != nil {
			t.Fatal(err)
		}
		w, rows := s.Var("w").value[0], rowsOf(t, s, 7, 8)
		if _, refused = s.Apply(p, time.Unix(0, 0), nil); refused != nil {
			if got := s.Var("w").value[0]; got != w {
				t.Fatalf("refused push changed w: %v -> %v", w, got)
			}
			if got := rowsOf(t, s, 7, 8); !equalF32(got, rows) {
				t.Fatalf("refused push changed the rows: %v -> %v", rows, got)
			}
			if s.Step() != step {
				t.Fatalf("refused push advanced the step to %d", s.Step())
			}
		}
		for _, x := range rowsOf(t, s, 7, 8) {
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				t.Fatalf("step %d: row value %v", step, x)
			}
		}
	}
	if refused == nil {
		t.Fatal("3e38 pushed to one row 10 times was never refused")
	}
	if !errors.Is(refused, ErrNonFinite) || !errors.Is(refused, &Error{Kind: Invalid}) || !strings.Contains(refused.Error(), `table "emb"`) || !strings.Contains(refused.Error(), "key 7") {
		t.Fatalf("error %q: want an Invalid ErrNonFinite naming table emb and key 7", refused)
	}
}

// A synchronous step whose averaged rows would not be finite is not
// applied and fails the job; nothing changes.
func TestNonFiniteSparseFailsSyncStep(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	if _, err := s.Init(sparseLayout(true, 2), [][]float32{{0}}); err != nil {
		t.Fatal(err)
	}
	// Each step moves row 7 by -1.5e38, the third past the float32 range.
	var err error
	var w float32
	var rows []float32
	var step int64
	for ; step < 5 && err == nil; step++ {
		w, rows = s.Var("w").value[0], rowsOf(t, s, 7)
		for wk := range 2 {
			p := sparsePush(wk, step, []uint64{7}, 1.5e38, 0)
			if err := s.Check(p); err != nil {
				t.Fatal(err)
			}
			_, err = s.Apply(p, time.Unix(0, 0), nil)
		}
	}
	if err == nil || !strings.Contains(err.Error(), `table "emb"`) || !strings.Contains(err.Error(), fmt.Sprintf("step %d", step-1)) {
		t.Fatalf("completing push: %v, want an error naming table emb and step %d", err, step-1)
	}
	if got := s.Var("w").value[0]; got != w {
		t.Fatalf("failed step changed w: %v -> %v", w, got)
	}
	if got := rowsOf(t, s, 7); !equalF32(got, rows) {
		t.Fatalf("failed step changed row 7: %v -> %v", rows, got)
	}
}

func equalF32(a, b []float32) bool {
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

// A table's rows are tried at the rate the push runs at, as a variable's
// values are: with the rate raised from step 1, a push that the base rate
// keeps finite but the raised rate does not is refused, and the row stays
// finite. Before, CheckPush tried the rule the table last ran (the base
// rate), passed the push, and the row became -Inf.
func TestSparseCheckAtScheduledRate(t *testing.T) {
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Logf: t.Logf})
	if _, err := s.Init(sparseLayout(false, 1), [][]float32{{0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ChangeRate(optim.RateChange{From: 1, LearningRate: 1e30}); err != nil {
		t.Fatal(err)
	}
	var refused error
	for step := int64(0); step < 2; step++ {
		p := sparsePush(0, step, []uint64{7}, 1e10, 0)
		p.Dense[0].Values[0] = 0
		if err := s.Check(p); err != nil {
			t.Fatal(err)
		}
		_, refused = s.Apply(p, time.Unix(0, 0), nil)
		for _, x := range rowsOf(t, s, 7) {
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				t.Fatalf("step %d: row value %v", step, x)
			}
		}
	}
	if refused == nil || !errors.Is(refused, ErrNonFinite) || !strings.Contains(refused.Error(), "key 7") {
		t.Fatalf("push at the raised rate: %v, want refused naming key 7", refused)
	}
}
