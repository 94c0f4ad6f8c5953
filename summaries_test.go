package paramserv_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/tfevents"
)

// A program's own loop, given its summary dir and step count through the
// environment as `paramserv local -- CMD` gives them, writes the losses it
// reports as TensorBoard summaries every N global steps, and no loss
// before it reports one; its checkpoint dir comes the same way.
func TestOwnLoopWritesSummariesFromTheEnvironment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ckpt, sum := filepath.Join(t.TempDir(), "ckpt"), filepath.Join(t.TempDir(), "summaries")
	tf, _ := servePS(t, ctx, paramserv.PSConfig{CheckpointDir: ckpt})
	t.Setenv("PARAMSERV_CHECKPOINT_DIR", ckpt)
	t.Setenv("PARAMSERV_SUMMARY_DIR", sum)
	t.Setenv("PARAMSERV_SAVE_SUMMARIES_STEPS", "5")
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  tf,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{2}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.5},
	}, paramserv.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	params, grads := w.NewParams(), w.NewParams()
	for i := range 20 {
		if i >= 10 {
			w.ReportLoss(float64(100-i), 4)
		}
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := tfevents.ReadScalars(sum)
	if err != nil {
		t.Fatal(err)
	}
	loss := got["loss"]
	if len(loss) == 0 || loss[0].Step <= 10 {
		t.Errorf("loss summaries %v, want some, none before the first report (step 11)", loss)
	}
	if r := got["learning_rate"]; len(r) < 3 || r[0].Value != 0.5 {
		t.Errorf("learning_rate summaries %v, want 0.5 every 5 steps", r)
	}
	if ex := got["examples/sec"]; len(ex) == 0 {
		t.Errorf("no examples/sec summaries, with 4 examples reported a step")
	}
	if m, _ := filepath.Glob(filepath.Join(ckpt, "ckpt-*")); len(m) == 0 {
		t.Errorf("no checkpoint in %s (PARAMSERV_CHECKPOINT_DIR): Done saves one", ckpt)
	}
}
