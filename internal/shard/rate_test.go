package shard

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
)

// rateLayout is SGD at rate 1 halving every step, with "own" on a fixed
// rule of its own.
func rateLayout() Layout {
	own := optim.Config{Name: "sgd", LearningRate: 1}
	return Layout{
		Vars:       []VarSpec{{Name: "b", Shape: []int64{1}}, {Name: "own", Shape: []int64{1}, Optimizer: &own}},
		Tables:     []TableSpec{{Name: "u", Dim: 1}},
		Optimizer:  optim.Config{Name: "sgd", LearningRate: 1, Schedule: "step(step_size=1,gamma=0.5)"},
		NumWorkers: 1,
	}
}

// pushOnes pushes gradient 1 to b, own and row 7 of u, once.
func pushOnes(t *testing.T, s *Shard) {
	t.Helper()
	p := &Push{Worker: 0, Step: s.Step(),
		Dense:  []DenseGrad{{Name: []byte("b"), Values: []float32{1}, Bad: Unchecked}, {Name: []byte("own"), Values: []float32{1}, Bad: Unchecked}},
		Sparse: []SparseGrad{{Table: []byte("u"), Keys: []uint64{7}, Values: []float32{1}, Bad: Unchecked}}}
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
		t.Fatal(err)
	}
}

func rateValues(t *testing.T, s *Shard) (b, own, row float32) {
	t.Helper()
	out := make([]float32, 1)
	if err := s.st.tables["u"].t.Pull([]uint64{7}, out); err != nil {
		t.Fatal(err)
	}
	return s.st.vars["b"].value[0], s.st.vars["own"].value[0], out[0]
}

// The schedule sets each update's rate from the global step before it,
// dense and sparse alike; the chief's change switches the job's rule (not
// a variable's own) at the step it names; the rate in force is in Status.
func TestScheduleAndChangeRate(t *testing.T) {
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Logf: t.Logf})
	if err := s.ChangeRate(optim.RateChange{From: 1, LearningRate: 1}); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("ChangeRate before Init: %v, want ErrNotInitialized", err)
	}
	if _, err := s.Init(rateLayout(), [][]float32{{0}, {0}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Status().LearningRate; got != 1 {
		t.Errorf("Status().LearningRate at step 0 = %v, want 1", got)
	}
	if err := s.ChangeRate(optim.RateChange{From: 3, LearningRate: 0.125}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		pushOnes(t, s)
	}
	// Steps 0, 1, 2 at 1, 0.5, 0.25; steps 3 and 4 at 0.125.
	want := -(1 + 0.5 + 0.25 + 0.125 + 0.125)
	b, own, row := rateValues(t, s)
	if b != float32(want) || row != float32(want) || own != -5 {
		t.Errorf("after 5 steps: b = %v, row = %v, own = %v; want %v, %v, -5", b, row, own, want, want)
	}
	if got := s.Status().LearningRate; got != 0.125 {
		t.Errorf("Status().LearningRate = %v, want 0.125", got)
	}
	if got := s.Layout().RateChanges; len(got) != 1 || got[0].From != 3 {
		t.Errorf("Layout().RateChanges = %+v, want the change from step 3", got)
	}
	for _, bad := range []optim.RateChange{{From: 9, LearningRate: math.NaN()}, {From: 9, LearningRate: 1, Schedule: "step()"}} {
		var se *Error
		if err := s.ChangeRate(bad); !errors.As(err, &se) || se.Kind != Invalid {
			t.Errorf("ChangeRate(%+v) = %v, want an Invalid error", bad, err)
		}
	}
}

// A checkpoint keeps the schedule (in the manifest's rule), the chief's
// rate changes and every rule's state (in the shard): training on from the
// restore gives, bit for bit, what training on without it gives, for every
// rule the ps knows.
func TestRatesAndEveryRuleCheckpointRoundTrip(t *testing.T) {
	for _, name := range optim.Names() {
		l := rateLayout()
		l.Optimizer = optim.Config{Name: name, LearningRate: 0.5, Schedule: "warmup(steps=2)+exponential(decay_steps=2,decay_rate=0.5)"}
		s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
		if _, err := s.Init(l, [][]float32{{0.5}, {0.5}}); err != nil {
			t.Fatal(err)
		}
		if err := s.ChangeRate(optim.RateChange{From: 4, LearningRate: 0.25, Schedule: "step(step_size=2)"}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			pushOnes(t, s)
		}
		sh := s.Snapshot()
		m := checkpoint.Manifest{FormatVersion: checkpoint.FormatVersion, Step: sh.Step, NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{{}}}
		if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: l.Optimizer, Tables: l.Tables,
			VarOptimizers: map[string]*optim.Config{"own": l.Vars[1].Optimizer}}); err != nil {
			t.Fatal(err)
		}
		for _, v := range l.Vars {
			m.Variables = append(m.Variables, checkpoint.VariableInfo{Name: v.Name, Shape: v.Shape, Parts: []checkpoint.Part{{Shard: 0}}})
		}
		m.Tables = append(m.Tables, checkpoint.TableInfo{Name: "u", Dim: 1, Shards: []int{0}})
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back checkpoint.Manifest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		st, err := Restore(contentsOf(back), func(int) (*checkpoint.Shard, error) { return &sh, nil }, 0, 1, 1, testRunner)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 2 }})
		r.Install(st)
		for range 4 {
			pushOnes(t, s)
			pushOnes(t, r)
		}
		if !reflect.DeepEqual(tensorsOf(r.Snapshot()), tensorsOf(s.Snapshot())) || r.Rate() != s.Rate() {
			t.Errorf("%s: training on from the restore differs from training on without it (rate %v, want %v)", name, r.Rate(), s.Rate())
		}
	}
}

// A chief restarted with another rate or schedule (a repeated Init) changes
// the job's schedule from then on, keeping the rate changes made before;
// a variable with its own rule keeps it.
func TestReinitChangesTheSchedule(t *testing.T) {
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Logf: t.Logf})
	l := rateLayout()
	if _, err := s.Init(l, [][]float32{{0}, {0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ChangeRate(optim.RateChange{From: 10, LearningRate: 0.5}); err != nil {
		t.Fatal(err)
	}
	pushOnes(t, s) // step 0 at rate 1
	l.Optimizer.Schedule = "step(step_size=1,gamma=0.25)"
	if _, err := s.Init(l, [][]float32{{0}, {0}}); err != nil {
		t.Fatal(err)
	}
	pushOnes(t, s) // step 1 at 0.25
	b, own, row := rateValues(t, s)
	if b != -1.25 || row != -1.25 || own != -2 {
		t.Errorf("after a re-Init with another schedule: b = %v, row = %v, own = %v; want -1.25, -1.25, -2", b, row, own)
	}
	if got := s.Layout().RateChanges; len(got) != 1 {
		t.Errorf("the rate changes after a re-Init: %+v, want the one made before", got)
	}
}
