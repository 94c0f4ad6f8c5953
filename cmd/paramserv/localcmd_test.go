package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// paramserv local -- CMD runs CMD as every worker with TF_CONFIG naming the
// cluster and its task. Here CMD is this binary's own train, which reads
// its role from TF_CONFIG alone: the job trains linreg to the right model
// and every worker's lines carry its prefix.
func TestLocalRunsACommandPerWorkerWithTFConfig(t *testing.T) {
	res := filepath.Join(t.TempDir(), "r.json")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--",
		binary, "train", "--model=linreg", "--train_steps=2000", "--result_file="+res)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.output())
	}
	out := p.output()
	for _, want := range []string{"[worker0] ", "[worker1] ", "[ps1] ", "all 4 processes exited 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Weight, Bias float64 }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Weight < 1.95 || r.Weight > 2.05 || r.Bias < 9.8 || r.Bias > 10.2 {
		t.Fatalf("weight %v bias %v, want about 2 and 10", r.Weight, r.Bias)
	}
}

// The TF_CONFIG each worker gets is exactly the operator's form, and a
// program that never tells the ps it is done still ends the job: once
// every worker exited 0, local stops the ps.
func TestLocalCommandSeesTFConfigAndPSAreStopped(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$TF_CONFIG\" > "+dir+"/tf-$$.json\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--", script)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.output())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "tf-*.json"))
	if len(files) != 2 {
		t.Fatalf("%d workers wrote their TF_CONFIG, want 2", len(files))
	}
	seen := map[int]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var tc struct {
			Cluster map[string][]string
			Task    struct {
				Type  string
				Index int
			}
		}
		if err := json.Unmarshal(b, &tc); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if len(tc.Cluster["ps"]) != 1 || len(tc.Cluster["worker"]) != 2 || tc.Task.Type != "worker" {
			t.Fatalf("TF_CONFIG %s", b)
		}
		seen[tc.Task.Index] = true
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("tasks %v, want workers 0 and 1", seen)
	}
	if !strings.Contains(p.output(), "stopping the ps") {
		t.Errorf("local did not say it stopped the ps:\n%s", p.output())
	}
}

// The workers' exit status is the job's: 2 (input to fix) gives 2, and a
// command that does not exist is refused at once.
func TestLocalCommandExitStatus(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "bad.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'bad flag' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--", script)
	if code := p.wait(t, time.Minute); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, p.output())
	}
	p = start(t, "local", nil, "local", "--ps=1", "--workers=1", "--", filepath.Join(dir, "no-such-program"))
	if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.output(), "no-such-program") {
		t.Fatalf("exit %d, want 2 naming the command\n%s", code, p.output())
	}
	p = start(t, "local", nil, "local", "--ps=1", "--")
	if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.output(), "nothing after --") {
		t.Fatalf("exit %d, want 2 saying nothing follows --\n%s", code, p.output())
	}
}
