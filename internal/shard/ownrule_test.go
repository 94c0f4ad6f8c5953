package shard

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
)

// ownRuleLayout is a job trained with SGD in which variable "a" has its own
// rule (Adam) and table "t" its own (FTRL); "b" and "u" use the job's.
func ownRuleLayout() Layout {
	adam := optim.Config{Name: "adam", LearningRate: 0.01}
	ftrl := optim.Config{Name: "ftrl", LearningRate: 0.1}
	return Layout{
		Vars:       []VarSpec{{Name: "a", Shape: []int64{4, 3}, Optimizer: &adam}, {Name: "b", Shape: []int64{5}}},
		Tables:     []TableSpec{{Name: "t", Dim: 2, Optimizer: &ftrl}, {Name: "u", Dim: 2}},
		Optimizer:  optim.Config{Name: "sgd", LearningRate: 0.1},
		NumWorkers: 1,
	}
}

// ownRulePushes applies the same 15 pushes to every shard, each shard
// getting the gradients of the variables and tables it holds.
func ownRulePushes(t *testing.T, shards ...*Shard) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 15 {
		dense := map[string][]float32{"a": randFloats(rng, 12), "b": randFloats(rng, 5)}
		keys := map[string][]uint64{"t": {rng.Uint64N(20), 20 + rng.Uint64N(20)}, "u": {rng.Uint64N(20)}}
		rows := map[string][]float32{"t": randFloats(rng, 4), "u": randFloats(rng, 2)}
		for _, s := range shards {
			p := &Push{Worker: 0, Step: int64(step)}
			for _, v := range s.st.layout.Vars {
				p.Dense = append(p.Dense, DenseGrad{Name: []byte(v.Name), Values: slices.Clone(dense[v.Name]), Bad: Unchecked})
			}
			for _, tb := range s.st.layout.Tables {
				p.Sparse = append(p.Sparse, SparseGrad{Table: []byte(tb.Name), Keys: slices.Clone(keys[tb.Name]), Values: slices.Clone(rows[tb.Name]), Bad: Unchecked})
			}
			if err := s.Check(p); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func ownRuleInit(t *testing.T, l Layout) *Shard {
	t.Helper()
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	rng := rand.New(rand.NewPCG(1, 2))
	init := map[string][]float32{"a": randFloats(rng, 12), "b": randFloats(rng, 5)}
	var values [][]float32
	for _, v := range l.Vars {
		values = append(values, slices.Clone(init[v.Name]))
	}
	if _, err := s.Init(l, values); err != nil {
		t.Fatal(err)
	}
	return s
}

// A variable or table with its own rule trains exactly as it would in a
// job of that rule alone, bit for bit, state slots and update counts
// included; the others train with the job's rule.
func TestOwnRulesMatchEachRuleAlone(t *testing.T) {
	l := ownRuleLayout()
	mixed := ownRuleInit(t, l)
	adamAlone := ownRuleInit(t, Layout{Vars: []VarSpec{{Name: "a", Shape: []int64{4, 3}}}, Optimizer: *l.Vars[0].Optimizer, NumWorkers: 1})
	ftrlAlone := ownRuleInit(t, Layout{Tables: []TableSpec{{Name: "t", Dim: 2}}, Optimizer: *l.Tables[0].Optimizer, NumWorkers: 1})
	sgdAlone := ownRuleInit(t, Layout{Vars: []VarSpec{{Name: "b", Shape: []int64{5}}}, Tables: []TableSpec{{Name: "u", Dim: 2}}, Optimizer: l.Optimizer, NumWorkers: 1})
	ownRulePushes(t, mixed, adamAlone, ftrlAlone, sgdAlone)

	got := tensorsOf(mixed.Snapshot())
	want := map[string][]byte{}
	for _, s := range []*Shard{adamAlone, ftrlAlone, sgdAlone} {
		for name, data := range tensorsOf(s.Snapshot()) {
			want[name] = data
		}
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("tensors %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for name, data := range want {
		if !slices.Equal(got[name], data) {
			t.Errorf("tensor %s differs from its rule applied alone", name)
		}
	}
	for _, name := range []string{"a/adam_m", "a/adam_v", "t/ftrl_n", "t/ftrl_z"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no tensor %s: the variable's or table's own rule was not used", name)
		}
	}
	if m := mixed.Snapshot().Meta; m["updates/a"] != "15" || m["updates/b"] != "15" {
		t.Errorf("update counts %v, want 15 each", m)
	}
}

func tensorsOf(sh checkpoint.Shard) map[string][]byte {
	out := map[string][]byte{}
	for _, x := range sh.Tensors {
		out[x.Name] = x.Data
	}
	return out
}

// A checkpoint keeps each variable's and table's rule: the manifest records
// them, a restore builds the same rules and state bit for bit, and training
// on from the restore gives what training on without it gives.
func TestOwnRulesCheckpointRoundTrip(t *testing.T) {
	l := ownRuleLayout()
	s := ownRuleInit(t, l)
	ownRulePushes(t, s)
	sh := s.Snapshot()
	m := checkpoint.Manifest{FormatVersion: checkpoint.FormatVersion, Step: sh.Step, NumPS: 1, NumWorkers: 1,
		Shards: []checkpoint.ShardInfo{{}}}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: l.Optimizer, Tables: l.Tables,
		VarOptimizers: map[string]*optim.Config{"a": l.Vars[0].Optimizer}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range l.Vars {
		m.Variables = append(m.Variables, checkpoint.VariableInfo{Name: v.Name, Shape: v.Shape, Parts: []checkpoint.Part{{Shard: 0}}})
	}
	for _, tb := range l.Tables {
		m.Tables = append(m.Tables, checkpoint.TableInfo{Name: tb.Name, Dim: int64(tb.Dim), Shards: []int{0}})
	}
	// Through the manifest's JSON, as a ps reads it from disk.
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back checkpoint.Manifest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	tr, err := back.Training()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr.VarOptimizers, map[string]*optim.Config{"a": l.Vars[0].Optimizer}) || !reflect.DeepEqual(tr.Tables, l.Tables) {
		t.Fatalf("training record read back: var rules %v, tables %+v", tr.VarOptimizers, tr.Tables)
	}
	st, err := Restore(contentsOf(back), func(int) (*checkpoint.Shard, error) { return &sh, nil }, 0, 1, 1, testRunner)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 2 }})
	r.Install(st)
	if got := r.Snapshot(); !reflect.DeepEqual(tensorsOf(got), tensorsOf(sh)) || !reflect.DeepEqual(got.Meta, sh.Meta) {
		t.Fatal("the restored state differs from the checkpointed one")
	}
	if err := sameLayout(st.layout, l); err != nil {
		t.Fatalf("the restored layout differs from the job's: %v", err)
	}
	ownRulePushes(t, s, r)
	if !reflect.DeepEqual(tensorsOf(r.Snapshot()), tensorsOf(s.Snapshot())) {
		t.Fatal("training on from the restore differs from training on without it")
	}
}

// A chief whose Init names another rule for a variable or table than the
// shard holds gets a layout conflict naming it; the same rules are a
// repeated Init.
func TestOwnRuleIsPartOfTheLayout(t *testing.T) {
	s := ownRuleInit(t, ownRuleLayout())
	// The same initial values: an Init with others before any update is
	// refused for them (reinit_test.go).
	values := [][]float32{slices.Clone(s.Var("a").value), slices.Clone(s.Var("b").value)}
	if already, err := s.Init(ownRuleLayout(), values); err != nil || !already {
		t.Fatalf("the same layout again: already %v, %v", already, err)
	}
	for name, change := range map[string]func(*Layout){
		"variable a": func(l *Layout) { l.Vars[0].Optimizer = nil },
		"variable b": func(l *Layout) { l.Vars[1].Optimizer = &optim.Config{Name: "sgd", LearningRate: 0.1} },
		"table t":    func(l *Layout) { l.Tables[0].Optimizer.LearningRate = 0.2 },
	} {
		l := ownRuleLayout()
		change(&l)
		if _, err := s.Init(l, values); err == nil || !strings.Contains(err.Error(), strings.Fields(name)[1]+" has update rule") {
			t.Errorf("%s with another rule: err %v, want a layout conflict naming it", name, err)
		}
	}
}
