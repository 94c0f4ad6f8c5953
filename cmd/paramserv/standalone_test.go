package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// train --standalone trains in one process with the output and result file
// of a job; a command line naming a cluster with it is input to fix.
func TestStandaloneLinreg(t *testing.T) {
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "standalone", nil, "train", "--standalone", "--model=linreg", "--train_steps=3000", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.Mode != "async" || r.GlobalStep != 3000 || r.Model != "linreg" {
		t.Errorf("result %+v", r)
	}
	b, _ := os.ReadFile(res)
	var extra struct {
		Standalone   bool    `json:"standalone"`
		ExamplesPerS float64 `json:"examples_per_s"`
	}
	if err := json.Unmarshal(b, &extra); err != nil || !extra.Standalone || extra.ExamplesPerS <= 0 {
		t.Errorf("result file %s: want standalone true and examples_per_s", b)
	}
	if out := p.output(); !strings.Contains(out, "step: 3000, weight: ") || strings.Contains(out, "cluster of") {
		t.Errorf("output lacks the progress line, or names a cluster:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--standalone", "--ps_hosts=127.0.0.1:1"}, "drop --ps_hosts"},
		{[]string{"train", "--standalone", "--checkpoint_dir=" + t.TempDir()}, "writes no checkpoints"},
		{[]string{"local", "--standalone"}, "run it as paramserv train --standalone"},
		{[]string{"train", "--standalone", "--overlap=maybe"}, `--overlap="maybe": want auto, true or false`},
	} {
		p := start(t, strings.Join(tc.args, " "), nil, tc.args...)
		if code := p.wait(t, 30*time.Second); code != 2 || !strings.Contains(p.output(), tc.want) {
			t.Errorf("%v: exit %d, want 2 and %q in:\n%s", tc.args, code, tc.want, p.output())
		}
	}
}
