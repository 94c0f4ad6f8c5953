package paramserv_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/optim"
)

// A variable with its own Optimizer is updated by that rule on a real ps,
// the others by the job's; the rules are in the checkpoint (a restarted ps
// restores them and the chief's Init agrees), and a chief asking another
// rule for a variable is told the layout differs.
func TestVariableOwnOptimizer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.AfterFunc(2*time.Minute, func() { cancel(); t.Error("the test did not end within 2 minutes") })
	defer deadline.Stop()

	adam := paramserv.Optimizer{Name: "adam", LearningRate: 0.01}
	cfg := paramserv.Config{
		Variables:     []paramserv.Variable{{Name: "a", Shape: []int{3}, Optimizer: &adam}, {Name: "b", Shape: []int{2}}},
		Optimizer:     paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		CheckpointDir: t.TempDir(),
		SaveSteps:     1000,
		Logf:          t.Logf,
	}
	init := paramserv.Params{"a": {1, 2, 3}, "b": {4, 5}}
	grads := paramserv.Params{"a": {0.5, -1, 2}, "b": {1, -2}}

	// The reference: each rule applied alone, as the optim package does.
	ref := func(c optim.Config, value, grad []float32, steps int) []float32 {
		r, err := optim.New(c)
		if err != nil {
			t.Fatal(err)
		}
		v := slices.Clone(value)
		state := make([][]float32, r.StateSlots())
		for i := range state {
			state[i] = make([]float32, len(v))
		}
		r.InitState(state)
		for s := 1; s <= steps; s++ {
			r.Update(v, grad, state, int64(s))
		}
		return v
	}
	const steps = 3
	want := paramserv.Params{
		"a": ref(optim.Config{Name: "adam", LearningRate: 0.01}, init["a"], grads["a"], steps),
		"b": ref(optim.Config{Name: "sgd", LearningRate: 0.1}, init["b"], grads["b"], steps),
	}

	// serve starts a ps on a loopback port; the cluster's TF_CONFIG for a
	// worker comes back with the channel its ServePS ends on.
	serve := func() (string, <-chan error) {
		return servePS(t, ctx, paramserv.PSConfig{CheckpointDir: cfg.CheckpointDir})
	}

	tf, psDone := serve()
	cfg.TFConfig = tf
	w, err := paramserv.Start(ctx, cfg, init)
	if err != nil {
		t.Fatal(err)
	}
	params := w.NewParams()
	for range steps {
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range want {
		if !slices.Equal(params[name], v) {
			t.Errorf("%s = %v after %d pushes, want %v (its rule alone)", name, params[name], steps, v)
		}
	}
	if err := w.Done(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-psDone; err != nil {
		t.Fatalf("ps: %v", err)
	}

	// A new ps restores the checkpoint Done saved, rules included: the
	// chief's Init finds the layout it asks for, and one more push goes on
	// with Adam's state and update count.
	tf, psDone = serve()
	cfg.TFConfig = tf
	w, err = paramserv.Start(ctx, cfg, init)
	if err != nil {
		t.Fatalf("restart with the same rules: %v", err)
	}
	if _, err := w.PushPull(ctx, grads, params); err != nil {
		t.Fatal(err)
	}
	if a := ref(optim.Config{Name: "adam", LearningRate: 0.01}, init["a"], grads["a"], steps+1); !slices.Equal(params["a"], a) {
		t.Errorf("a = %v after a restore and a push, want %v", params["a"], a)
	}
	w.Close()

	// Another rule for "a" is another layout.
	other := cfg
	other.Variables = []paramserv.Variable{{Name: "a", Shape: []int{3}}, {Name: "b", Shape: []int{2}}}
	if _, err := paramserv.Start(ctx, other, init); !errors.Is(err, paramserv.ErrLayout) {
		t.Errorf("Start with the job's rule for a, which the ps hold with Adam: %v, want ErrLayout", err)
	}
	cancel()
	<-psDone
}

// A variable's or table's own rule that no ps would take is refused by
// Start, naming it, before any connection.
func TestStartRefusesABadOwnOptimizer(t *testing.T) {
	tf := `{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"worker","index":0}}`
	bad := &paramserv.Optimizer{Name: "adamax", LearningRate: 0.1}
	for what, cfg := range map[string]paramserv.Config{
		`variable "a"`: {Variables: []paramserv.Variable{{Name: "a", Shape: []int{1}, Optimizer: bad}}},
		`table "t"`:    {Tables: []paramserv.Table{{Name: "t", Dim: 1, Optimizer: bad}}},
	} {
		cfg.TFConfig, cfg.Optimizer = tf, paramserv.Optimizer{Name: "sgd", LearningRate: 0.1}
		cfg.StartupTimeout = time.Second
		_, err := paramserv.Start(context.Background(), cfg, nil)
		if err == nil || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "adamax") {
			t.Errorf("%s with rule adamax: %v, want an error naming both", what, err)
		}
	}
}
