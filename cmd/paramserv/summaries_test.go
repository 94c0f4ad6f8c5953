package main

import (
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/tfevents"
)

// TestSummariesOfLocalJob: the chief writes a TensorBoard event file
// (CRCs checked on reading) with the loss and rates every
// --save_summaries_steps and the final metrics; with only
// --checkpoint_dir the file goes there, as TensorFlow's Supervisor logdir.
func TestSummariesOfLocalJob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "summaries")
	// One worker: the chief sees every global step, so the points fall
	// exactly on the multiples of --save_summaries_steps.
	p := start(t, "local", nil, "local", "--ps=2", "--workers=1", "--model=linreg", "--train_steps=3000",
		"--summary_dir="+dir, "--save_summaries_steps=500", "--metrics_addr=")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	files, err := tfevents.Files(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("event files %v (%v), want 1: only the chief writes", files, err)
	}
	s, err := tfevents.ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"loss", "global_step/sec", "examples/sec", "dropped_pushes"} {
		pts := s[tag]
		if len(pts) != 6 {
			t.Errorf("%s: %d points %v, want 6 (steps 500, 1000, ..., 3000)", tag, len(pts), pts)
			continue
		}
		for i, pt := range pts {
			if pt.Step != int64(500*(i+1)) || math.IsNaN(pt.Value) {
				t.Errorf("%s: point %d is %+v, want a value at step %d", tag, i, pt, 500*(i+1))
			}
		}
	}
	if l := s["loss"]; len(l) > 0 && (l[len(l)-1].Value <= 0 || l[len(l)-1].Value > 1) {
		t.Errorf("last loss %g, want linreg's (about 0.1)", l[len(l)-1].Value)
	}
	if r := s["examples/sec"]; len(r) > 0 && math.Abs(r[0].Value/s["global_step/sec"][0].Value-100) > 1e-3 {
		t.Errorf("examples/sec %g is not 100 x global_step/sec %g (--batch_size=100, async)", r[0].Value, s["global_step/sec"][0].Value)
	}
	if w := s["eval/weight"]; len(w) != 1 || w[0].Step != 3000 || math.Abs(w[0].Value-2) > 0.05 {
		t.Errorf("eval/weight %v, want about 2 at step 3000", w)
	}

	ck := filepath.Join(t.TempDir(), "ckpt")
	p = start(t, "local ckpt", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=300",
		"--checkpoint_dir="+ck, "--save_summaries_steps=100", "--metrics_addr=")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	if files, err := tfevents.Files(ck); err != nil || len(files) != 1 {
		t.Fatalf("event files in --checkpoint_dir: %v (%v), want 1: only the chief writes", files, err)
	}
	// The chief may have done none of the 300 steps (worker 1 did them
	// while the chief saved its first checkpoint): its final evaluation
	// is there all the same.
	if s, err := tfevents.ReadScalars(ck); err != nil || len(s["eval/weight"]) != 1 {
		t.Errorf("summaries in --checkpoint_dir: eval/weight %v, %v; want the final weight", s["eval/weight"], err)
	}
}

// TestValidationDuringTraining: every --steps_to_validate local steps the
// MNIST chief scores the validation set, logs it and summarises it.
func TestValidationDuringTraining(t *testing.T) {
	data := testutil.DataDir(t, "mnist")
	dir := filepath.Join(t.TempDir(), "summaries")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--model=mnist", "--data_dir="+data,
		"--train_steps=300", "--steps_to_validate=100", "--summary_dir="+dir, "--metrics_addr=")
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	lines := regexp.MustCompile(`Worker 0: validation at global step (\d+): val_accuracy ([0-9.]+), val_cross_entropy ([0-9.]+)`).FindAllStringSubmatch(p.output(), -1)
	if len(lines) != 3 || lines[0][1] != "100" || lines[2][1] != "300" {
		t.Fatalf("validation lines %q, want 3, at global steps 100, 200, 300", lines)
	}
	if !strings.Contains(p.output(), "Worker 0: training step 100 done (global step: 100), loss ") {
		t.Errorf("the step line does not show the loss")
	}
	s, err := tfevents.ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	acc := s["validation/val_accuracy"]
	if len(acc) != 3 || acc[2].Step != 300 || acc[2].Value < 0.8 {
		t.Errorf("validation/val_accuracy %v, want 3 points, the last at step 300 above 0.8", acc)
	}
	if len(s["validation/val_cross_entropy"]) != 3 {
		t.Errorf("validation/val_cross_entropy %v, want 3 points", s["validation/val_cross_entropy"])
	}
}
