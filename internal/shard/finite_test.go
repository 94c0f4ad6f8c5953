package shard

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel/goroutines"
)

func pushW(worker int, step int64, g ...float32) *Push {
	return &Push{Worker: worker, Step: step, Dense: []DenseGrad{{Name: []byte("w"), Values: g, Bad: Unchecked}}}
}

// A push of finite gradients whose update would make a value infinite is
// refused whole, naming the variable and the step, and nothing changes
// (before, 3e38 pushed twice with sgd at rate 1 made w -Inf).
func TestNonFiniteResultRefusedAsync(t *testing.T) {
	for _, rule := range []string{"sgd", "momentum", "adagrad", "adam", "ftrl"} {
		t.Run(rule, func(t *testing.T) {
			s := New(Config{NumWorkers: 1})
			l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{2}}}, Optimizer: optim.Config{Name: rule, LearningRate: 1}, NumWorkers: 1}
			if _, err := s.Init(l, [][]float32{{0, 0}}); err != nil {
				t.Fatal(err)
			}
			var refused error
			for step := int64(0); step < 200 && refused == nil; step++ {
				before := append([]float32(nil), s.Var("w").value...)
				p := pushW(0, step, 1, 3e38)
				if err := s.Check(p); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
					refused = err
					if got := s.Var("w").value; got[0] != before[0] || got[1] != before[1] {
						t.Fatalf("refused push changed w: %v -> %v", before, got)
					}
					if s.Step() != step {
						t.Fatalf("refused push advanced the step to %d", s.Step())
					}
				}
				assertFinite(t, s)
			}
			if rule == "sgd" && refused == nil {
				t.Fatal("sgd at rate 1: 3e38 pushed 200 times was never refused")
			}
			if refused != nil {
				if !errors.Is(refused, ErrNonFinite) || !errors.Is(refused, &Error{Kind: Invalid}) || !strings.Contains(refused.Error(), `variable "w"`) || !strings.Contains(refused.Error(), "at step") {
					t.Fatalf("error %q: want an Invalid ErrNonFinite naming variable w and the step", refused)
				}
			}
		})
	}
}

// A synchronous step whose average would make a value infinite is not
// applied and fails the job, naming the variable and the step.
func TestNonFiniteResultFailsSyncStep(t *testing.T) {
	s := New(Config{NumWorkers: 2})
	l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{1}}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 2, Sync: true, ReplicasToAggregate: 2}
	if _, err := s.Init(l, [][]float32{{-3e38}}); err != nil {
		t.Fatal(err)
	}
	var err error
	for w := range 2 {
		p := pushW(w, 0, 3e38)
		if err := s.Check(p); err != nil {
			t.Fatal(err)
		}
		_, err = s.Apply(p, time.Unix(0, 0), nil)
	}
	if err == nil || !strings.Contains(err.Error(), `variable "w"`) || !strings.Contains(err.Error(), "step 0") {
		t.Fatalf("completing push: %v, want an error naming variable w and step 0", err)
	}
	if got := s.Var("w").value[0]; got != -3e38 {
		t.Fatalf("w = %v after a refused step, want -3e38", got)
	}
	if s.Failed() == nil {
		t.Fatal("the shard does not report the failed step")
	}
}

func assertFinite(t *testing.T, s *Shard) {
	t.Helper()
	for _, v := range s.Vars() {
		for i, x := range v.value {
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				t.Fatalf("%s[%d] = %v", v.name, i, x)
			}
		}
		for j, st := range v.state {
			for i, x := range st {
				if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
					t.Fatalf("%s state %d [%d] = %v", v.name, j, i, x)
				}
			}
		}
	}
}

// The trial is spread over the cores as the update is: a value that would
// overflow in the last of several parts is found, and nothing changes.
func TestNonFiniteResultRefusedParallel(t *testing.T) {
	n := 3 * optim.MinChunk
	s := New(Config{NumWorkers: 1, Update: func(r optim.Rule, p, g []float32, st [][]float32, step int64) {
		optim.ApplyParallel(r, p, g, st, step, goroutines.Width(4))
	}})
	l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{int64(n)}}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}
	init := make([]float32, n)
	init[n-1] = -3e38
	if _, err := s.Init(l, [][]float32{init}); err != nil {
		t.Fatal(err)
	}
	g := make([]float32, n)
	for i := range g {
		g[i] = 1
	}
	g[n-1] = 3e38
	p := &Push{Worker: 0, Step: 0, Dense: []DenseGrad{{Name: []byte("w"), Values: g, Bad: Unchecked}}}
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	_, err := s.Apply(p, time.Unix(0, 0), nil)
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), fmt.Sprintf("element %d", n-1)) {
		t.Fatalf("Apply: %v, want element %d named", err, n-1)
	}
	if v := s.Var("w").value; v[0] != 0 || v[n-1] != -3e38 {
		t.Fatalf("a refused push changed w: %v ... %v", v[0], v[n-1])
	}
}
