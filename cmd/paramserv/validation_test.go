package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/tfevents"
)

// writeRuleData writes n LIBSVM lines whose label is 1 exactly when
// feature 1 is on (else feature 2 is), with noise features 3 to 30;
// flipped, the labels are the opposite.
func writeRuleData(t *testing.T, path string, n int, seed uint64, flipped bool) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for range n {
		pos := r.IntN(2) == 1
		label, feat := "-1", 2
		if pos {
			label, feat = "+1", 1
		}
		if flipped {
			label = map[string]string{"+1": "-1", "-1": "+1"}[label]
		}
		fmt.Fprintf(&b, "%s %d:1", label, feat)
		for k := 3; k <= 30; k++ {
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, " %d:1", k)
			}
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSparseValidationDuringTraining: with --validation_data the
// sparse_lr chief scores that file every --steps_to_validate local steps,
// logs it and summarises it as validation/<metric>. The validation file's
// labels are the opposite of the training and test files' rule, so a
// validation computed on the test (or training) data would show.
func TestSparseValidationDuringTraining(t *testing.T) {
	dir := t.TempDir()
	train, test, val := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm"), filepath.Join(dir, "val.svm")
	writeRuleData(t, train, 2000, 1, false)
	writeRuleData(t, test, 300, 2, false)
	writeRuleData(t, val, 300, 3, true)
	sum, res := filepath.Join(dir, "summaries"), filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--model=sparse_lr", "--optimizer=ftrl",
		"--train_data="+train, "--test_data="+test, "--validation_data="+val, "--batch_size=50",
		"--train_steps=150", "--steps_to_validate=50", "--summary_dir="+sum, "--result_file="+res, "--metrics_addr=")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	lines := regexp.MustCompile(`Worker 0: validation at global step (\d+): val_accuracy ([0-9.]+), val_auc ([0-9.]+), val_log_loss ([0-9.]+)`).FindAllStringSubmatch(p.output(), -1)
	if len(lines) != 3 || lines[0][1] != "50" || lines[2][1] != "150" {
		t.Fatalf("validation lines %q, want 3, at global steps 50, 100, 150", lines)
	}
	if acc, _ := strconv.ParseFloat(lines[2][2], 64); acc > 0.1 {
		t.Errorf("last val_accuracy %g, want below 0.1 (the validation file's labels are flipped)", acc)
	}
	if !strings.Contains(p.output(), "sparse_lr: validating on 300 examples of "+val) {
		t.Errorf("the log does not name the validation file")
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		TestAccuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.TestAccuracy < 0.9 {
		t.Errorf("test accuracy %g (%v), want above 0.9: the model learnt the rule", r.TestAccuracy, err)
	}
	s, err := tfevents.ReadScalars(sum)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"validation/val_accuracy", "validation/val_auc", "validation/val_log_loss"} {
		if v := s[tag]; len(v) != 3 || v[0].Step != 50 || v[2].Step != 150 {
			t.Errorf("%s %v, want 3 points at steps 50 to 150", tag, v)
		}
	}
	if v := s["validation/val_accuracy"]; len(v) == 3 && v[2].Value > 0.1 {
		t.Errorf("validation/val_accuracy at step 150 is %g, want below 0.1", v[2].Value)
	}

	// Without the flag, no validation; a validation file that is also a
	// test file, or the flag with another model, is input to fix.
	p = start(t, "local plain", nil, "local", "--ps=1", "--workers=1", "--model=sparse_lr", "--train_data="+train,
		"--batch_size=50", "--train_steps=100", "--steps_to_validate=50", "--metrics_addr=")
	if code := p.wait(t, 2*time.Minute); code != 0 || strings.Contains(p.output(), "validation at") {
		t.Errorf("without --validation_data: exit %d, validation lines: %v", code, strings.Contains(p.output(), "validation at"))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model=sparse_lr", "--train_data=" + train, "--test_data=" + test, "--validation_data=" + test}, "reads the --test_data"},
		{[]string{"--model=linreg", "--validation_data=" + val}, "--validation_data: --model=linreg does not use it (it is for sparse_lr)"},
	} {
		p := start(t, "local bad", nil, append([]string{"local", "--ps=1", "--workers=1", "--train_steps=10", "--metrics_addr="}, c.args...)...)
		if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.output(), c.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", c.args, code, c.want, p.output())
		}
	}
}
