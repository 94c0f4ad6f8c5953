package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

func reinitLayout(opt optim.Config) Layout {
	return Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{2}}}, Optimizer: opt, NumWorkers: 1}
}

// An Init that came first does not own the model: the chief's Init with
// other initial values, before any update, is refused naming the variable
// (before, the first Init won and the chief was told it initialised).
func TestReinitOtherValuesRefused(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	if _, err := s.Init(reinitLayout(optim.Config{Name: "sgd", LearningRate: 0.1}), [][]float32{{1000, 1000}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Init(reinitLayout(optim.Config{Name: "sgd", LearningRate: 0.1}), [][]float32{{0.5, 0.5}})
	var se *Error
	if !errors.As(err, &se) || se.Kind != Conflict || se.Flag != "initial values" || !strings.Contains(err.Error(), `variable "w"`) {
		t.Fatalf("Init with other values: %v, want a Conflict naming variable w", err)
	}
	if got := s.Var("w").value[0]; got != 1000 {
		t.Fatalf("w = %v", got)
	}
	// The same values again (a restarted chief) pass.
	if already, err := s.Init(reinitLayout(optim.Config{Name: "sgd", LearningRate: 0.1}), [][]float32{{1000, 1000}}); err != nil || !already {
		t.Fatalf("the same Init again: %v, %v", already, err)
	}
	// Once training moved the values, a chief's Init takes the model as it is.
	p := pushW(0, 0, 1, 1)
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(reinitLayout(optim.Config{Name: "sgd", LearningRate: 0.1}), [][]float32{{0.5, 0.5}}); err != nil {
		t.Fatalf("Init after training: %v", err)
	}
}

// A changed learning rate (and other hyper-parameters of the same rule) is
// applied from the current step, logged with both values, and kept in the
// layout the next checkpoint records; another optimizer or mode is a
// Conflict naming the flag.
func TestReinitChangedFlags(t *testing.T) {
	var logs []string
	s := New(Config{NumWorkers: 1, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	l := reinitLayout(optim.Config{Name: "momentum", LearningRate: 0.01, Momentum: 0.9})
	l.Tables = []TableSpec{{Name: "emb", Dim: 2}}
	if _, err := s.Init(l, [][]float32{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	for step := int64(0); step < 3; step++ {
		p := pushW(0, step, 1, 1)
		if err := s.Check(p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		flag string
		edit func(*Layout)
	}{
		{"--optimizer", func(l *Layout) { l.Optimizer = optim.Config{Name: "adam", LearningRate: 0.01} }},
		{"--sync", func(l *Layout) { l.Sync, l.ReplicasToAggregate = true, 1 }},
		{"--max_staleness", func(l *Layout) { l.MaxStaleness = 5 }},
	} {
		l2 := l
		c.edit(&l2)
		_, err := s.Init(l2, [][]float32{{0, 0}})
		var se *Error
		if !errors.As(err, &se) || se.Kind != Conflict || se.Flag != c.flag || !strings.Contains(err.Error(), c.flag) {
			t.Fatalf("%s changed: %v, want a Conflict naming it", c.flag, err)
		}
	}
	if got := s.Layout().Optimizer; got.Name != "momentum" || got.LearningRate != 0.01 {
		t.Fatalf("a refused Init changed the optimizer to %+v", got)
	}
	l2 := l
	l2.Optimizer.LearningRate = 1e-9
	if _, err := s.Init(l2, [][]float32{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Layout().Optimizer.LearningRate; got != 1e-9 {
		t.Fatalf("learning rate %v after the Init, want 1e-9", got)
	}
	if !strings.Contains(strings.Join(logs, "\n"), "learning rate 0.01 → 1e-09 from step 3") {
		t.Fatalf("no log line of the change:\n%s", strings.Join(logs, "\n"))
	}
	if s.st.tables["emb"].t.Rule() != s.st.rule || s.Var("w").rule != s.st.rule {
		t.Fatal("the variable or the table kept the old rule")
	}
	before := s.Var("w").value[0]
	p := pushW(0, 3, 1, 1)
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
		t.Fatal(err)
	}
	if d := before - s.Var("w").value[0]; d > 1e-6 {
		t.Fatalf("an update at rate 1e-9 moved w by %v", d)
	}
}

// A name longer than the data path carries is refused at Init (before, it
// was initialised and every push then failed).
func TestInitRefusesLongName(t *testing.T) {
	s := New(Config{NumWorkers: 1})
	l := Layout{Vars: []VarSpec{{Name: strings.Repeat("v", 2000), Shape: []int64{1}}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}
	if _, err := s.Init(l, [][]float32{{0}}); err == nil || !strings.Contains(err.Error(), "2000-byte name") {
		t.Fatalf("Init: %v, want the name refused", err)
	}
}

// A restart that writes out a rule's default (--beta1=0.9 for Adam) where
// the first run left it zero changes no hyper-parameter: nothing is logged
// and the rule is kept. Before, the raw configurations were compared and the
// log said "beta1 0 → 0.9".
func TestInitWithDefaultsWrittenOutChangesNothing(t *testing.T) {
	var logs []string
	s := New(Config{NumWorkers: 1, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{2}}}, Optimizer: optim.Config{Name: "adam", LearningRate: 0.01}, NumWorkers: 1}
	if _, err := s.Init(l, [][]float32{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	rule := s.st.rule
	l2 := l
	l2.Optimizer.Beta1, l2.Optimizer.Beta2, l2.Optimizer.Epsilon = 0.9, 0.999, 1e-8
	if _, err := s.Init(l2, [][]float32{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if s.st.rule != rule {
		t.Error("the rule was rebuilt though no hyper-parameter changed")
	}
	for _, line := range logs {
		if strings.Contains(line, "→") {
			t.Errorf("logged a change: %s", line)
		}
	}
}
