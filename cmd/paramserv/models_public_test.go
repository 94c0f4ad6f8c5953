package main

// The workloads written on the public API (models/...), run by name as
// users run them: paramserv local --model=mf|deep_ctr.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// result reads the chief's result file.
func resultFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func metric(t *testing.T, r map[string]any, key string) float64 {
	t.Helper()
	v, ok := r[key].(float64)
	if !ok {
		t.Fatalf("result file has no %q: %v", key, r)
	}
	return v
}

// mfFullRunRMSE is the bound the full MF run (the defaults) must beat: the
// issue's goal is 0.91 on u1, where it measured 0.905–0.909 (README); the
// bound leaves room for the run-to-run spread of about ±0.002.
const mfFullRunRMSE = 0.912

// Matrix factorisation of MovieLens 100K's u1 split, 1 ps and 2 workers.
// Under -short a short run must beat 1.0 (the global mean alone scores
// about 1.15, the biases alone about 0.94); the full run, the defaults,
// is the README's figure.
func TestMFByName(t *testing.T) {
	data := testutil.DataDir(t, "ml-100k/u1.base")
	res := filepath.Join(t.TempDir(), "result.json")
	args := []string{"local", "--ps=1", "--workers=2", "--model=mf", "--data_dir=" + data,
		"--train_data=ml-100k/u1.base", "--test_data=ml-100k/u1.test", "--result_file=" + res}
	floor := mfFullRunRMSE
	if testing.Short() {
		args, floor = append(args, "--train_steps=2000"), 1.0
	}
	p := start(t, "local", nil, args...)
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if rmse := metric(t, resultFile(t, res), "test_rmse"); rmse >= floor {
		t.Errorf("test RMSE %.4f, want below %.3f", rmse, floor)
	}
}

// Deep CTR (Wide & Deep, 26 tables with admission and eviction) on a small
// synth-ctr data set, 1 ps and 2 workers. Under -short it must learn (the
// planted model's AUC on this data is about 0.82, sparse_lr gets 0.73 and this
// model 0.76 in the same steps; a constant scores 0.5).
// The full run, the README's, must beat sparse_lr's defaults on the same
// data and steps (0.7619-0.7633 against 0.7589-0.7613 over three seeds).
func TestDeepCTRByName(t *testing.T) {
	dir := t.TempDir()
	rows, steps := "20000", "400"
	if !testing.Short() {
		rows, steps = "200000", "3000"
	}
	gen := start(t, "synth-ctr", nil, "data", "synth-ctr", "--rows="+rows, "--fields=26", "--shards=2", "--out="+dir)
	if code := gen.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("synth-ctr exit %d", code)
	}
	res := filepath.Join(t.TempDir(), "deep.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=deep_ctr", "--train_data="+dir,
		"--test_data="+filepath.Join(dir, "test.tsv"), "--train_steps="+steps, "--result_file="+res)
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := resultFile(t, res)
	auc := metric(t, r, "test_auc")
	if auc < 0.70 {
		t.Errorf("deep_ctr test AUC %.4f, want at least 0.70", auc)
	}
	if out := p.output(); !strings.Contains(out, "26 fields") {
		t.Errorf("the workers did not read 26 fields")
	}
	if testing.Short() {
		return
	}
	lr := filepath.Join(t.TempDir(), "lr.json")
	q := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=sparse_lr", "--train_data="+dir,
		"--test_data="+filepath.Join(dir, "test.tsv"), "--input_format=criteo", "--fields=0,26", "--train_steps="+steps, "--result_file="+lr)
	if code := q.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("sparse_lr exit %d", code)
	}
	if base := metric(t, resultFile(t, lr), "test_auc"); auc <= base {
		t.Errorf("deep_ctr test AUC %.4f, sparse_lr %.4f on the same data and steps", auc, base)
	}
}

// Input to fix exits 2 before or at the start of training: missing data
// flags, a malformed ratings line, a test file that is not there.
func TestPublicModelsBadInputExitTwo(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.base")
	if err := os.WriteFile(good, []byte("1\t2\t5\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.base")
	if err := os.WriteFile(bad, []byte("1\t2\t5\t0\n3\tx\t4\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		args       []string
	}{
		{"mf without test data", "--test_data", []string{"--model=mf", "--train_data=" + bad}},
		{"malformed rating", "bad.base:2", []string{"--model=mf", "--train_data=" + bad, "--test_data=" + bad}},
		{"deep_ctr without data", "--train_data", []string{"--model=deep_ctr"}},
		{"missing test file, found before training", "nonexistent.test", []string{"--model=mf", "--train_data=" + good, "--test_data=" + filepath.Join(dir, "nonexistent.test")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, "local", nil, append([]string{"local", "--ps=1", "--workers=1", "--max_restarts=0"}, c.args...)...)
			if code := p.wait(t, time.Minute); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if !strings.Contains(p.output(), c.want) {
				t.Errorf("output does not name %q", c.want)
			}
		})
	}
}

// The public models refuse the model-only flags they do not use, as the
// built-in ones do (exit 2, naming the flag and the models that use it),
// and lda and logreg_lbfgs, which pick their own update rule, refuse the
// optimizer's flags; the built-in models refuse the public ones' flags.
func TestPublicModelsRefuseFlagsTheyDoNotUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model=mf", "--hidden_units=50"}, "--hidden_units: --model=mf does not use it (it is for deep_ctr, mnist)"},
		{[]string{"--model=mf", "--deep_scale=0.5"}, "--deep_scale: --model=mf does not use it (it is for deep_ctr)"},
		{[]string{"--model=deep_ctr", "--num_features=10"}, "--num_features: --model=deep_ctr does not use it (it is for logreg_lbfgs, sparse_lr)"},
		{[]string{"--model=deep_ctr", "--input_format=criteo"}, "--input_format: --model=deep_ctr does not use it (it is for logreg_lbfgs, sparse_lr)"},
		{[]string{"--model=lda", "--test_data=x"}, "--test_data: --model=lda does not use it (it is for deep_ctr, logreg_lbfgs, mf, sparse_lr)"},
		{[]string{"--model=logreg_lbfgs", "--dim=8"}, "--dim: --model=logreg_lbfgs does not use it (it is for deep_ctr, mf)"},
		{[]string{"--model=logreg_lbfgs", "--min_count=2"}, "--min_count: --model=logreg_lbfgs does not use it (it is for deep_ctr, sparse_lr)"},
		{[]string{"--model=sparse_lr", "--reg=0.1"}, "--reg: --model=sparse_lr does not use it (it is for mf)"},
		{[]string{"--model=lda", "--learning_rate=0.1"}, "--learning_rate: --model=lda adds the Gibbs sampler's count deltas on the ps, so it takes no optimizer, learning rate or batch size; drop it"},
		{[]string{"--model=lda", "--batch_size=10"}, "--batch_size: --model=lda adds"},
		{[]string{"--model=logreg_lbfgs", "--optimizer=adam"}, "--optimizer: --model=logreg_lbfgs sums full-batch gradients on the ps and steps by L-BFGS with a line search, so it takes no optimizer"},
		{[]string{"--model=logreg_lbfgs", "--initial_accumulator_value=1"}, "--initial_accumulator_value: --model=logreg_lbfgs sums"},
	} {
		code, out, errOut := runCLI(t, nil, append([]string{"local", "--ps=1", "--workers=1"}, c.args...)...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "paramserv local: "+c.want) {
			t.Errorf("%v: exit %d (want 2), stdout %q, stderr:\n%s\nwant it to start with:\nparamserv local: %s", c.args, code, out, errOut, c.want)
		}
	}
}

// logreg_lbfgs always trains synchronously, so --sync_replicas asks for
// what it does anyway: accepted, and the run reaches its optimum.
func TestLBFGSAcceptsSyncReplicas(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "train.svm")
	if err := os.WriteFile(data, []byte(strings.Repeat("1 1:1 3:1\n0 2:1\n1 1:1\n0 2:1 3:1\n", 5)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=logreg_lbfgs", "--sync_replicas",
		"--train_data="+data, "--num_features=3", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, p.output())
	}
	if f, ok := readJSON(t, res)["objective"].(float64); !ok || !(f > 0) {
		t.Errorf("result %v: want a positive objective", readJSON(t, res))
	}
}
