package paramserv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// startWithTable is startOne with table t (dim 2).
func startWithTable(t *testing.T, ctx context.Context) *paramserv.Worker {
	t.Helper()
	return startOne(t, ctx, paramserv.Table{Name: "t", Dim: 2})
}

// PullTables, as the other blocking calls, runs after the calls in flight:
// it reads the rows a PushPullRowsAsync started before it pushed (and
// under -race, it does not run beside that call).
func TestPullTablesWaitsForCallsInFlight(t *testing.T) {
	ctx := testCtx(t)
	w := startWithTable(t, ctx)
	for i := 1; i <= 3; i++ {
		c := w.PushPullRowsAsync(ctx, w.NewParams(), w.NewParams(), []paramserv.Rows{{Table: "t", Keys: []uint64{7}, Values: []float32{1, 2}}})
		out := make([]float32, 2)
		if err := w.PullTables(ctx, []paramserv.Rows{{Table: "t", Keys: []uint64{7}, Values: out}}); err != nil {
			t.Fatal(err)
		}
		if want := []float32{-float32(i), -2 * float32(i)}; !slices.Equal(out, want) {
			t.Errorf("PullTables after push %d in flight: row %v, want %v (the push applied first)", i, out, want)
		}
		if _, err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// A second Close returns nil, and every call after Close fails at once
// saying so, where it waited for the ps to "recover" (RecoveryTimeout, 5
// minutes by default) before.
func TestCallsAfterCloseFailAtOnce(t *testing.T) {
	ctx := testCtx(t)
	w := startWithTable(t, ctx)
	p := w.NewParams()
	if _, err := w.PushPull(ctx, w.NewParams(), p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
	rows := []paramserv.Rows{{Table: "t", Keys: []uint64{1}, Values: make([]float32, 2)}}
	for name, call := range map[string]func() error{
		"Pull":              func() error { _, err := w.Pull(ctx, p); return err },
		"PushPull":          func() error { _, err := w.PushPull(ctx, p, p); return err },
		"PushPullRows":      func() error { _, err := w.PushPullRows(ctx, p, p, rows); return err },
		"PullRows":          func() error { return w.PullRows(ctx, "t", []uint64{1}, make([]float32, 2)) },
		"PullTables":        func() error { return w.PullTables(ctx, rows) },
		"PullAsync":         func() error { _, err := w.PullAsync(ctx, p).Wait(); return err },
		"PushPullRowsAsync": func() error { _, err := w.PushPullRowsAsync(ctx, p, p, rows).Wait(); return err },
		"PullRowsAsync":     func() error { _, err := w.PullRowsAsync(ctx, "t", []uint64{1}, make([]float32, 2)).Wait(); return err },
		"Done":              func() error { return w.Done(ctx) },
	} {
		start := time.Now()
		err := call()
		if err == nil || !strings.Contains(err.Error(), name+" after Close") {
			t.Errorf("%s after Close: %v, want an error saying %q", name, err, name+" after Close")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s after Close took %v, want at once", name, d)
		}
	}
	if got := w.Step(); got != 1 {
		t.Errorf("Step after Close: %d, want 1 (the step last pulled)", got)
	}
}

// A call whose context ended says so through errors.Is, whatever layer
// noticed first.
func TestCallErrorsWrapTheContextsError(t *testing.T) {
	ctx := testCtx(t)
	w := startWithTable(t, ctx)
	done, stop := context.WithCancel(ctx)
	stop()
	p := w.NewParams()
	if _, err := w.Pull(done, p); !errors.Is(err, context.Canceled) {
		t.Errorf("Pull with a cancelled context: %v, want errors.Is context.Canceled", err)
	}
	if _, err := w.PullAsync(done, p).Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("PullAsync with a cancelled context: Wait says %v, want errors.Is context.Canceled", err)
	}
	if _, err := w.Pull(ctx, p); err != nil {
		t.Errorf("Pull after a cancelled one: %v", err)
	}
}

// Run refuses a NewModel that returns neither a Model nor an error, where
// it panicked before.
func TestRunRefusesANilModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tf, _ := servePS(t, ctx, paramserv.PSConfig{})
	err := paramserv.Run(ctx, paramserv.RunConfig{
		TFConfig: tf, TrainSteps: 5,
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		NewModel:  func(paramserv.ModelConfig) (paramserv.Model, error) { return nil, nil },
	})
	if err == nil || !strings.Contains(err.Error(), "NewModel returned no Model") {
		t.Errorf("Run with a NewModel returning nil, nil: %v, want an error saying so", err)
	}
}

// A second Done returns nil (the ps, told once, may have exited since);
// a variable with a dimension < 1 is refused before any connection, where
// the chief's check of its initial values spoke first ("has 0 elements,
// want -2").
func TestDoneTwiceAndBadShapes(t *testing.T) {
	ctx := testCtx(t)
	tf, psDone := servePS(t, ctx, paramserv.PSConfig{})
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  tf,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{2}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1},
	}, paramserv.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Done(ctx); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if err := <-psDone; err != nil {
		t.Fatalf("the ps after Done: %v", err)
	}
	if err := w.Done(ctx); err != nil {
		t.Errorf("a second Done: %v, want nil", err)
	}
	for _, shape := range [][]int{{-2}, {3, 0}} {
		_, err := paramserv.Start(ctx, paramserv.Config{
			TFConfig:  `{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"worker","index":0}}`,
			Variables: []paramserv.Variable{{Name: "w", Shape: shape}},
		}, paramserv.Params{"w": {}})
		if want := fmt.Sprintf(`variable "w": shape %v: want every dimension >= 1`, shape); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Start with shape %v: %v, want an error saying %q", shape, err, want)
		}
	}
}

// Push pushes without reading values back, PushAsync without waiting, and
// PushRows pushes one table's rows: a Pull after each reads the update
// (SGD at rate 1: a value moves by -g). A synchronous job's Push returns
// once its step has completed.
func TestPushAndPushRows(t *testing.T) {
	ctx := testCtx(t)
	w := startWithTable(t, ctx)
	p := w.NewParams()
	step, err := w.Push(ctx, paramserv.Params{"w": {1, 2}})
	if err != nil || step != 1 {
		t.Fatalf("Push: step %d, %v; want 1, nil", step, err)
	}
	if step, err := w.Pull(ctx, p); err != nil || step != 1 || !slices.Equal(p["w"], []float32{-1, -2}) {
		t.Fatalf("Pull after Push: step %d, w %v, %v; want 1, [-1 -2], nil", step, p["w"], err)
	}
	c := w.PushAsync(ctx, paramserv.Params{"w": {1, 1}})
	if step, err := c.Wait(); err != nil || step != 2 {
		t.Fatalf("PushAsync: step %d, %v; want 2, nil", step, err)
	}
	if step, err := w.Pull(ctx, p); err != nil || step != 2 || !slices.Equal(p["w"], []float32{-2, -3}) {
		t.Fatalf("Pull after PushAsync: step %d, w %v, %v; want 2, [-2 -3], nil", step, p["w"], err)
	}
	if err := w.PushRows(ctx, "t", []uint64{7, 9}, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 4)
	if err := w.PullRows(ctx, "t", []uint64{9, 7}, out); err != nil || !slices.Equal(out, []float32{-3, -4, -1, -2}) {
		t.Fatalf("PullRows after PushRows: %v, %v; want [-3 -4 -1 -2], nil", out, err)
	}
	if err := w.PushRows(ctx, "nope", []uint64{1}, []float32{1, 2}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("PushRows to an unknown table: %v, want an error naming it", err)
	}
	if _, err := w.Push(ctx, paramserv.Params{"w": {1}}); err == nil {
		t.Error("Push of a gradient of the wrong length: no error")
	}
	w.Close()
	if _, err := w.Push(ctx, paramserv.Params{"w": {1, 2}}); err == nil || !strings.Contains(err.Error(), "Push after Close") {
		t.Errorf("Push after Close: %v, want it refused", err)
	}
	if _, err := w.PushAsync(ctx, paramserv.Params{"w": {1, 2}}).Wait(); err == nil || !strings.Contains(err.Error(), "PushAsync after Close") {
		t.Errorf("PushAsync after Close: %v, want it refused", err)
	}

	// Synchronous, one worker: the step completes with its push.
	tf, _ := servePS(t, ctx, paramserv.PSConfig{})
	sw, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  tf,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{2}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1},
		Sync:      true,
	}, paramserv.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	for i := int64(1); i <= 3; i++ {
		if step, err := sw.Push(ctx, paramserv.Params{"w": {1, 2}}); err != nil || step != i {
			t.Fatalf("synchronous Push %d: step %d, %v; want %d, nil", i, step, err, i)
		}
	}
	if step, err := sw.Pull(ctx, p); err != nil || step != 3 || !slices.Equal(p["w"], []float32{-3, -6}) {
		t.Fatalf("Pull after 3 synchronous Pushes: step %d, w %v, %v; want 3, [-3 -6], nil", step, p["w"], err)
	}
}
