package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// A model of its own, in a module of its own that imports only the public
// package (examples/go/linreg: its go.mod has a replace directive to this
// checkout), builds and trains on a real local cluster run by
// paramserv local -- CMD, both workers ending at the right model.
func TestOwnModelInASeparateModule(t *testing.T) {
	testutil.Full(t, "builds a second Go module; scripts/test vets it in the quick run")
	root, _ := filepath.Abs("../..")
	dir := filepath.Join(root, "examples", "go", "linreg")
	exe := filepath.Join(t.TempDir(), "linreg")
	build := exec.Command("go", "build", "-o", exe, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the separate module: %v\n%s", err, out)
	}
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--", exe, "--train_steps=2000")
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.output())
	}
	re := regexp.MustCompile(`worker (\d): global step (\d+), weight ([-\d.]+), bias ([-\d.]+)`)
	found := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(p.output(), -1) {
		step, _ := strconv.Atoi(m[2])
		w, _ := strconv.ParseFloat(m[3], 64)
		b, _ := strconv.ParseFloat(m[4], 64)
		if step < 2000 || w < 1.9 || w > 2.1 || b < 9.9 || b > 10.1 {
			t.Errorf("worker %s: step %d, weight %v, bias %v; want >= 2000, about 2 and 10", m[1], step, w, b)
		}
		found[m[1]] = true
	}
	if !found["0"] || !found["1"] || !strings.Contains(p.output(), "all 4 processes exited 0") {
		t.Fatalf("not every worker reported its model:\n%s", p.output())
	}

	// The same model in the built-in loop (paramserv.Run): progress lines,
	// the final evaluation and the chief's result file.
	res := filepath.Join(t.TempDir(), "result.json")
	p = start(t, "local builtin", nil, "local", "--ps=2", "--workers=2", "--", exe, "--builtin_loop", "--train_steps=2000", "--result_file="+res)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("built-in loop: exit %d\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "step: ") {
		t.Errorf("the built-in loop logged no progress line:\n%s", p.output())
	}
	checkLinreg(t, readResult(t, res))
}
