package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kill -9 of a ps whose tables are mostly on disk (a budget of 16 KiB)
// while its tier moves rows: paramserv local restarts it, the restarted ps
// empties its store and restores every row from the newest checkpoint,
// and the job finishes.
func TestTieredPSKilled(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("fault tests take a while; run without -short (CI runs them)")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "synth")
	gen := start(t, "data", nil, "data", "synth-ctr", "--out="+data, "--rows=20000", "--shards=2")
	if code := gen.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("data synth-ctr exit %d", code)
	}
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=sparse_lr", "--input_format=criteo", "--fields=0,26",
		"--train_data="+data, "--train_steps=300", "--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=20",
		"--table_memory=16KiB", "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, 3*time.Minute)
	victim := findChild(t, p.cmd.Process.Pid, "ps", 0)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := p.output()
	// The restarted ps opened its tier again, in the same directory.
	if n := strings.Count(out, "the rest on disk in "+filepath.Join(dir, "tables-ps-0")); n < 2 {
		t.Errorf("the ps opened its disk tier %d times, want 2 (before and after the kill)", n)
	}
	for _, want := range []string{"ps0 exited unexpectedly (killed by signal killed)", "restored checkpoint of step"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The store is scratch: the ps that ended removed it.
	if _, err := os.Stat(filepath.Join(dir, "tables-ps-0")); !os.IsNotExist(err) {
		t.Errorf("the disk tier's directory outlived the job: %v", err)
	}
	if r := readResult(t, res); r.GlobalStep < 300 {
		t.Errorf("global step %d, want >= 300", r.GlobalStep)
	}
}
