package main

// Exit statuses: a task stopped by SIGTERM is a death, not a success; input
// to fix is exit 2, from train and from local alike.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A ps sent SIGTERM in mid-training under local exits 143 with a line that
// says why, local restarts it as it would a killed one, and the job ends
// with the right model.
func TestSIGTERMToPSUnderLocal(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=6000", "--steps_to_validate=500",
		"--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=500", "--recovery_timeout=1m", "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, time.Minute)
	ps := findChild(t, p.cmd.Process.Pid, "ps", 0)
	if err := syscall.Kill(ps, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.output()
	for _, want := range []string{
		"ps 0: received SIGTERM at global step ",
		"before every worker finished (0 of 2 done); exiting 143",
		"ps0 exited unexpectedly (exit status 143 (stopped by SIGTERM)); restarting it",
		"all 3 processes exited 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.GlobalStep < 6000 {
		t.Errorf("global step %d, want >= 6000", r.GlobalStep)
	}
}

// A worker sent SIGTERM under local is restarted too, and the job ends well.
func TestSIGTERMToWorkerUnderLocal(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=6000", "--steps_to_validate=500",
		"--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=500", "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, time.Minute)
	w := findChild(t, p.cmd.Process.Pid, "worker", 1)
	if err := syscall.Kill(w, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.output()
	for _, want := range []string{
		"worker 1: received SIGTERM before training finished",
		"worker1 exited unexpectedly (exit status 143 (stopped by SIGTERM)); restarting it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkLinreg(t, readResult(t, res))
}

// `train` stopped by SIGTERM or SIGINT before its work is done exits
// 128+signal and says why; a ps with no worker ever coming included.
func TestTrainSignalledExitsNonZero(t *testing.T) {
	for _, tc := range []struct {
		job  string
		sig  syscall.Signal
		code int
		want string
	}{
		{"ps", syscall.SIGTERM, 143, "ps 0: received SIGTERM at global step 0 before every worker finished (0 of 2 done); exiting 143"},
		{"ps", syscall.SIGINT, 130, "ps 0: received SIGINT at global step 0 before every worker finished (0 of 2 done); exiting 130"},
		{"worker", syscall.SIGTERM, 143, "worker 1: received SIGTERM before training finished"},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.job, tc.sig), func(t *testing.T) {
			hosts := freeHosts(t, 3)
			idx := 0
			if tc.job == "worker" {
				idx = 1
			}
			p := start(t, tc.job, nil, clusterArgs(hosts[:1], hosts[1:], tc.job, idx)...)
			if tc.job == "ps" {
				p.waitFor(t, "serving on", time.Minute)
			} else {
				p.waitFor(t, "cluster of 1 ps and 2 workers", time.Minute)
			}
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, time.Minute); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			if out := p.output(); !strings.Contains(out, tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
