package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	dir, data := tierJobDir(t)
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=sparse_lr", "--input_format=criteo", "--fields=0,26",
		"--train_data="+data, "--train_steps=2000", "--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=20",
		"--table_memory=16KiB", "--result_file="+res)
	// 2000 steps, not 300: the job must still be running when the kill
	// comes (300 steps take 1.5 s here).
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
	if r := readResult(t, res); r.GlobalStep < 2000 {
		t.Errorf("global step %d, want >= 2000", r.GlobalStep)
	}
}

// A store left damaged by a ps killed with kill -9 (every file in its
// --table_dir overwritten before the next start) is not read: the
// restarted job's ps says it emptied it, restores its shard from the
// newest checkpoint and finishes.
func TestTieredStoreDamagedAtRestart(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("fault tests take a while; run without -short (CI runs them)")
	}
	dir, data := tierJobDir(t)
	tables := filepath.Join(dir, "tables")
	args := []string{"local", "--ps=1", "--workers=2", "--model=sparse_lr", "--input_format=criteo", "--fields=0,26",
		"--train_data=" + data, "--checkpoint_dir=" + filepath.Join(dir, "ckpt"), "--save_steps=20",
		"--table_memory=16KiB", "--table_dir=" + tables}
	first := start(t, "first job", nil, append(args, "--train_steps=100000")...)
	first.waitCount(t, "saved checkpoint of step", 2, 3*time.Minute)
	// kill -9 of paramserv local takes its ps and workers with it.
	ps := findChild(t, first.cmd.Process.Pid, "ps", 0)
	if err := syscall.Kill(first.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t, time.Minute)
	for deadline := time.Now().Add(time.Minute); syscall.Kill(ps, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the ps (pid %d) outlived its killed parent by a minute", ps)
		}
	}
	store := filepath.Join(tables, "ps-0")
	var files []string
	ents, _ := os.ReadDir(store)
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(store, e.Name()))
		}
	}
	if len(files) == 0 {
		t.Fatalf("the killed ps left no store files in %s", store)
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("damaged"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := filepath.Join(dir, "result.json")
	second := start(t, "second job", nil, append(args, "--train_steps=200", "--result_file="+res)...)
	if code := second.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("second job: exit %d", code)
	}
	out := second.output()
	for _, want := range []string{fmt.Sprintf("disk tier: %s holds %d files a previous process left (its store, perhaps damaged): emptied, unread", store, len(files)), "restored checkpoint of step"} {
		if !strings.Contains(out, want) {
			t.Errorf("the second job's output lacks %q", want)
		}
	}
	if r := readResult(t, res); r.GlobalStep < 200 {
		t.Errorf("global step %d, want >= 200", r.GlobalStep)
	}
}

// A store file damaged under a running ps (every table file in its
// --table_dir overwritten with zeros, its size kept, while the job trains
// with a 16 KiB budget: rows move in and out all the time) is reported
// when a read or a compaction meets it: the ps says its disk store failed,
// naming the store's directory, the file and pebble's reason, and stops;
// the workers wait for it rather than give up (before, they failed the
// job); paramserv local restarts it, the restarted ps restores its shard
// from the newest checkpoint, and the job finishes.
func TestTieredStoreDamagedWhileRunning(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("fault tests take a while; run without -short (CI runs them)")
	}
	dir, data := tierJobDir(t)
	tables := filepath.Join(dir, "tables")
	store := filepath.Join(tables, "ps-0")
	res := filepath.Join(dir, "result.json")
	// Long enough that the job cannot end before a damaged page is read:
	// 400 steps took 2 s here, and a CI run once finished them before the
	// first round of damage was read.
	const steps = 5000
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=sparse_lr", "--input_format=criteo", "--fields=0,26",
		"--train_data="+data, "--train_steps="+strconv.Itoa(steps), "--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=20",
		"--table_memory=16KiB", "--table_dir="+tables, "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, 3*time.Minute)
	// Damage the table files as they are, again as compactions write new
	// ones, until the ps reports it.
	const failed = "tier: disk store failed"
	damaged := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(p.output(), failed) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in 3 minutes of damaging %d files of %s", failed, len(damaged), store)
		}
		ents, _ := os.ReadDir(store)
		for _, e := range ents {
			f := filepath.Join(store, e.Name())
			// The store's table files: the hash store's, or pebble's.
			if !e.Type().IsRegular() || damaged[f] || !(strings.HasSuffix(e.Name(), ".hash") || strings.HasSuffix(e.Name(), ".sst")) {
				continue
			}
			if zeroFile(f) == nil {
				damaged[f] = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := p.output()
	var report string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, failed) {
			report = l
			break
		}
	}
	// The report names the store and says why (pebble's reason: a
	// checksum or a block that cannot be read).
	if !strings.Contains(report, store) {
		t.Errorf("the failure does not name the store %s: %q", store, report)
	}
	for _, want := range []string{
		"the ps restarts and restores its shard from the newest checkpoint; waiting for the ps to recover", // the workers wait
		"ps0 exited unexpectedly",
		"restored checkpoint of step",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if r := readResult(t, res); r.GlobalStep < steps {
		t.Errorf("global step %d, want >= %d", r.GlobalStep, steps)
	}
	t.Logf("%d files damaged; the report: %s", len(damaged), report)
}

// zeroFile overwrites a file's bytes with zeros, in place (its size and
// its open descriptors kept, as a failing disk leaves it).
func zeroFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil {
		_, err = f.WriteAt(make([]byte, fi.Size()), 0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// tierJobDir is a tier test's directory, with 20,000 synth-ctr rows in two
// shards under data.
func tierJobDir(t *testing.T) (dir, data string) {
	t.Helper()
	dir = t.TempDir()
	data = filepath.Join(dir, "synth")
	gen := start(t, "data", nil, "data", "synth-ctr", "--out="+data, "--rows=20000", "--shards=2")
	if code := gen.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("data synth-ctr exit %d", code)
	}
	return dir, data
}
