package paramserv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// On a real ps, a schedule set with the job's Optimizer halves the rate
// each step, the chief's ChangeRate switches it at the step it names, a
// variable with its own Optimizer keeps its rate, and a worker that is not
// the chief may not change it.
func TestScheduleAndChangeRateOnAPS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.AfterFunc(2*time.Minute, func() { cancel(); t.Error("the test did not end within 2 minutes") })
	defer deadline.Stop()

	own := paramserv.Optimizer{Name: "sgd", LearningRate: 1}
	cfg := paramserv.Config{
		Variables: []paramserv.Variable{{Name: "b", Shape: []int{1}}, {Name: "own", Shape: []int{1}, Optimizer: &own}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1, Schedule: "step(step_size=1,gamma=0.5)"},
		Logf:      t.Logf,
	}
	tf, _ := servePS(t, ctx, paramserv.PSConfig{})
	cfg.TFConfig = tf
	w, err := paramserv.Start(ctx, cfg, paramserv.Params{"b": {0}, "own": {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.ChangeRate(ctx, 2, 0.125, ""); err != nil {
		t.Fatal(err)
	}
	if err := w.ChangeRate(ctx, 3, 0.125, "cosine()"); err == nil || !strings.Contains(err.Error(), "missing decay_steps") {
		t.Errorf("ChangeRate with a bad schedule: %v, want the schedule's error", err)
	}
	grads := paramserv.Params{"b": {1}, "own": {1}}
	params := w.NewParams()
	for range 4 {
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			t.Fatal(err)
		}
	}
	// Steps 0 and 1 at 1 and 0.5, then 0.125 twice.
	if b, o := params["b"][0], params["own"][0]; b != -1.75 || o != -4 {
		t.Errorf("after 4 steps: b = %v, own = %v; want -1.75 and -4", b, o)
	}
}
