package session

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// Every worker's barrier and all-reduces, in order, over two ps: each
// worker reads the same reductions.
func TestCollectives(t *testing.T) {
	ctx := testCtx(t)
	const workers = 3
	addrs := startPS(t, 2, workers)
	vars := []model.Variable{{Name: "w", Shape: []int{1}}}
	var wg sync.WaitGroup
	got := make([][][]float64, workers)
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			cfg := Config{
				Config: lifecycle.Config{
					Cluster: cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: make([]string, workers)},
						Task: cluster.Task{Job: cluster.JobWorker, Index: w}},
					Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
				},
				Variables: vars,
			}
			var init model.Params
			if w == 0 {
				init = model.Params{"w": {0}}
			}
			s, err := Start(ctx, cfg, init)
			if err != nil {
				errs[w] = err
				return
			}
			defer s.Close()
			for _, call := range []struct {
				op     string
				values []float64
			}{{"barrier", nil}, {"sum", []float64{float64(w), 1}}, {"mean", []float64{float64(w)}}, {"max", []float64{-float64(w), float64(w)}}} {
				out, err := s.Collective(ctx, call.op, call.values, time.Minute)
				if err != nil {
					errs[w] = err
					return
				}
				got[w] = append(got[w], out)
			}
		})
	}
	wg.Wait()
	want := [][]float64{{}, {3, 3}, {1}, {0, 2}}
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		for i := range want {
			if !slices.Equal(got[w][i], want[i]) {
				t.Errorf("worker %d, call %d: %v, want %v", w, i, got[w][i], want[i])
			}
		}
	}
}

// A worker that never comes: the others' barrier gives up, naming it.
func TestBarrierNamesTheMissingWorker(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 1, 2)
	s, err := Start(ctx, Config{
		Config: lifecycle.Config{
			Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"a:1", "b:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
		},
		Variables: []model.Variable{{Name: "w", Shape: []int{1}}},
	}, model.Params{"w": {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Collective(ctx, "barrier", nil, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "for worker(s) 1 of 2: worker 1 never heard from") {
		t.Fatalf("got %v, want the missing worker named", err)
	}
}
