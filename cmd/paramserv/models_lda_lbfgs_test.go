package main

// lda and logreg_lbfgs, written on the public API (models/...), run by
// name as users run them.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// readJSON reads a result file into a map.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("result file: %v", err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result file %s: %v", b, err)
	}
	return r
}

// TestLocalLDA runs --model=lda by name on the whole AP corpus for 2
// sweeps: the counts on the ps sum to the training tokens, and the
// held-out perplexity is already below the unigram model's (4,753 on this
// split; 300 sweeps reach 2,965).
func TestLocalLDA(t *testing.T) {
	dir := testutil.DataDir(t, "ap/ap.dat")
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--model=lda", "--data_dir="+dir,
		"--train_data=ap/ap.dat", "--train_steps=2", "--result_file="+res)
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := readJSON(t, res)
	tokens, _ := r["train_tokens"].(float64)
	if tokens != 392769 || r["count_sum"] != tokens || r["topic_count_sum"] != tokens {
		t.Errorf("train_tokens %v (want 392769), count_sum %v, topic_count_sum %v: want all equal", r["train_tokens"], r["count_sum"], r["topic_count_sum"])
	}
	if pp, _ := r["perplexity"].(float64); !(pp > 1000 && pp < 4753) {
		t.Errorf("perplexity %v after 2 sweeps, want below the unigram model's 4753", r["perplexity"])
	}
	if !strings.Contains(p.output(), "lda: topic 19: ") {
		t.Errorf("output lacks the top words of topic 19")
	}
}

// TestLocalLogRegLBFGS runs --model=logreg_lbfgs by name on a9a and checks
// liblinear's objective (train -s 0 -e 1e-8) is reached to 1e-6.
func TestLocalLogRegLBFGS(t *testing.T) {
	dir := testutil.DataDir(t, "a9a/a9a")
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=logreg_lbfgs", "--data_dir="+dir,
		"--train_data=a9a/a9a", "--test_data=a9a/a9a.t", "--input_format=libsvm", "--num_features=123", "--result_file="+res)
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := readJSON(t, res)
	const liblinear = 10529.5625846
	if f, _ := r["objective"].(float64); (f-liblinear)/liblinear > 1e-6 {
		t.Errorf("objective %v, liblinear's %v: want within 1e-6 relative", r["objective"], liblinear)
	}
	if acc, _ := r["test_accuracy"].(float64); acc < 0.845 {
		t.Errorf("test accuracy %v, want ≥ 0.845", r["test_accuracy"])
	}
}

// TestPublicModelsBadInputExitTwo: input a public model cannot use is the
// user's to fix.
func TestLDAAndLBFGSBadInputExitTwo(t *testing.T) {
	dir := testutil.DataDir(t, "a9a/a9a")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model=lda", "--train_data=ap/ap.dat", "--sync_replicas"}, "drop --sync_replicas"},
		{[]string{"--model=lda", "--train_data=ap/none.dat"}, "--train_data=ap/none.dat: no such file"},
		{[]string{"--model=logreg_lbfgs", "--train_data=a9a/a9a", "--input_format=criteo"}, "want --input_format=libsvm"},
		{[]string{"--model=logreg_lbfgs", "--train_data=a9a/a9a", "--test_data=a9a/a9a"}, "are the same file"},
	} {
		p := start(t, "local", nil, append([]string{"local", "--ps=1", "--workers=1", "--data_dir=" + dir}, c.args...)...)
		if code := p.wait(t, 2*time.Minute); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(p.output(), c.want) {
			t.Errorf("%v: output lacks %q:\n%s", c.args, c.want, p.output())
		}
	}
}
