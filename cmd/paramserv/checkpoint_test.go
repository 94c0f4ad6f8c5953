package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two jobs given the same --checkpoint_dir (issue 12, failure 16): the
// second one's chief and ps refuse at start, naming the directory and the
// job holding it, the ps before reading any checkpoint of the first; the
// first finishes as if alone and releases the lock.
func TestTwoJobsOneCheckpointDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	res := filepath.Join(t.TempDir(), "result.json")
	args := []string{"local", "--ps=1", "--workers=1", "--model=linreg", "--checkpoint_dir=" + dir, "--save_steps=5000"}
	first := start(t, "first job", nil, append(args, "--train_steps=100000", "--result_file="+res)...)
	first.waitFor(t, "chief initialised", time.Minute)

	second := start(t, "second job", nil, append(args, "--train_steps=1000")...)
	code := second.wait(t, time.Minute)
	out := second.output()
	host, _ := os.Hostname()
	// The second job's ps refuses too, before it reads any of the first
	// job's checkpoints; whichever task says it first is the one reported.
	want := regexp.MustCompile(`(chief|ps 0): checkpoint: directory in use by another job: --checkpoint_dir ` + regexp.QuoteMeta(dir) +
		` is held by job job-[0-9a-f]{12} \(pid \d+ on ` + regexp.QuoteMeta(host) + `, started `)
	if !want.MatchString(out) {
		t.Fatalf("the second job does not name the directory and the holder:\n%s", out)
	}
	// The task exits 2 (input to fix), and local passes it on.
	if code != 2 || !regexp.MustCompile(`(worker0|ps0) failed: exit status 2`).MatchString(out) || strings.Contains(out, "restored checkpoint") {
		t.Fatalf("second job: exit %d, want 2 from a task refused at start, and nothing restored:\n%s", code, out)
	}
	select {
	case <-first.done:
		t.Fatalf("the first job ended before the second was refused; make it longer:\n%s", first.output())
	default:
	}

	if code := first.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("first job: exit %d", code)
	}
	checkLinreg(t, readResult(t, res))
	if _, err := os.Stat(filepath.Join(dir, "paramserv.lock")); !os.IsNotExist(err) {
		t.Errorf("the lock is still there after the first job ended: %v", err)
	}
	// Once it is free, another job takes the directory.
	third := start(t, "third job", nil, append(args, "--train_steps=20000")...)
	if code := third.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("third job: exit %d", code)
	}
	if out := first.output() + third.output(); strings.Contains(out, "taking over the lock") {
		t.Errorf("a lock was taken over:\n%s", out)
	}
}

// A job whose chief was killed leaves its lock; the next job on the
// directory finds its holder gone and takes it over at once, saying so.
// The first job's local is stopped first, so the killed chief stays a
// zombie that /proc still shows (as a killed process is until its parent
// reaps it): the lock's kernel lock, which the kernel drops at the kill,
// is what tells the next job (before it, the next job was refused until the
// parent reaped the chief, or for a minute where /proc was no help).
func TestCheckpointLockOfKilledJob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"local", "--ps=1", "--workers=1", "--model=linreg", "--checkpoint_dir=" + dir, "--save_steps=5000"}
	first := start(t, "first job", nil, append(args, "--train_steps=1000000", "--restart_workers=false")...)
	first.waitFor(t, "chief initialised", time.Minute)
	chief := findChild(t, first.cmd.Process.Pid, "worker", 0)
	if err := syscall.Kill(first.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(first.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	if err := syscall.Kill(chief, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	zombie := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !zombie; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", chief))
		if err != nil {
			t.Fatalf("the killed chief %d is gone from /proc while its parent is stopped: %v", chief, err)
		}
		zombie = regexp.MustCompile(`\) Z `).Match(b)
	}
	if !zombie {
		t.Fatalf("the killed chief %d is not a zombie after a minute", chief)
	}
	if _, err := os.Stat(filepath.Join(dir, "paramserv.lock")); err != nil {
		t.Fatalf("the killed chief's lock: %v", err)
	}
	res := filepath.Join(t.TempDir(), "result.json")
	second := start(t, "second job", nil, append(args, "--train_steps=20000", "--result_file="+res)...)
	if code := second.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("second job: exit %d:\n%s", code, second.output())
	}
	if want := fmt.Sprintf("taking over the lock of %s from job job-", dir); !strings.Contains(second.output(), want) ||
		!strings.Contains(second.output(), fmt.Sprintf("whose process %d has ended (the kernel let go of its lock of paramserv.lock.held)", chief)) {
		t.Errorf("the second job does not say it took over the lock of pid %d:\n%s", chief, second.output())
	}
	checkLinreg(t, readResult(t, res))
	syscall.Kill(first.cmd.Process.Pid, syscall.SIGCONT)
	stopped = false
	if code := first.wait(t, time.Minute); code == 0 {
		t.Fatal("the first job exited 0 without its chief")
	}
}

// A damaged newest checkpoint is set aside when the ps restore (issue 12,
// failure 9): the job goes on from the one before it and saves again at the
// damaged one's step, where it used to stop with "already complete".
func TestDamagedCheckpointSavedAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"local", "--ps=2", "--workers=1", "--model=linreg", "--checkpoint_dir=" + dir, "--save_steps=400"}
	p := start(t, "first job", nil, append(args, "--train_steps=1000")...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	shard := filepath.Join(dir, "ckpt-1000", "shard-1-of-2.safetensors")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The ps restore step 800; the restarted chief saves at once, at the
	// first step it reaches (801), and then every 199 steps comes to step
	// 1000 again.
	res := filepath.Join(t.TempDir(), "r.json")
	p = start(t, "second job", nil, "local", "--ps=2", "--workers=1", "--model=linreg", "--checkpoint_dir="+dir,
		"--save_steps=199", "--train_steps=1500", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("second job: exit %d", code)
	}
	out := p.output()
	if !regexp.MustCompile(`ckpt-1000 damaged: shard-1-of-2.safetensors: checksum mismatch: .*; set aside as ckpt-1000\.set-aside-\d{8}T\d{6}Z`).MatchString(out) ||
		!strings.Contains(out, "saved checkpoint of step 1000") {
		t.Fatalf("the second job does not set ckpt-1000 aside and save it again:\n%s", out)
	}
	checkLinreg(t, readResult(t, res))
	ls := start(t, "ckpt ls", nil, "ckpt", "ls", dir)
	if code := ls.wait(t, time.Minute); code != 0 {
		t.Fatalf("ckpt ls: exit %d", code)
	}
	lsOut := ls.output()
	if !regexp.MustCompile(`ckpt-1000\.set-aside-\S+ +1000 .* set aside: damaged: shard-1-of-2.safetensors: checksum mismatch`).MatchString(lsOut) ||
		!regexp.MustCompile(`(?m)^ckpt-1000 +1000 .* ok$`).MatchString(lsOut) {
		t.Errorf("ckpt ls:\n%s", lsOut)
	}
}

// A checkpoint file truncated by an outside tool while the ps that
// restored it trains on: the restored table kept its keys and index in the
// file's pages (a private mapping), and the next touch of a page the
// truncation took used to kill the ps with SIGBUS. The restore now makes
// those pages the ps's own, so the ps trains on and the job ends 0.
func TestCheckpointTruncatedUnderThePS(t *testing.T) {
	data := synthCTR(t, 30000)
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"local", "--ps=1", "--workers=1", "--model=sparse_lr", "--optimizer=ftrl", "--input_format=criteo", "--fields=0,26",
		"--batch_size=100", "--train_data=" + data, "--checkpoint_dir=" + dir, "--restart_workers=false"}
	first := start(t, "first job", nil, append(args, "--train_steps=300", "--save_steps=300")...)
	if code := first.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("first job: exit %d", code)
	}
	shard := filepath.Join(dir, "ckpt-300", "shard-0-of-1.safetensors")
	fi, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	second := start(t, "second job", nil, append(args, "--train_steps=1500", "--save_steps=600")...)
	second.waitFor(t, "restored checkpoint of step 300", 2*time.Minute)
	if err := os.Truncate(shard, 0); err != nil {
		t.Fatal(err)
	}
	code := second.wait(t, 3*time.Minute)
	out := second.output()
	if code != 0 || strings.Contains(out, "SIGBUS") || strings.Contains(out, "unexpected fault address") || !strings.Contains(out, "saved checkpoint of step 1500") {
		t.Fatalf("second job, its restored checkpoint (%d bytes) truncated under its ps: exit %d, want 0 and the ps training on to its final checkpoint:\n%s", fi.Size(), code, out)
	}
}

// synthCTR writes a synthetic click data set of rows rows (26 fields)
// and returns its directory.
func synthCTR(t *testing.T, rows int) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "ctr")
	gen := start(t, "synth-ctr", nil, "data", "synth-ctr", fmt.Sprintf("--rows=%d", rows), "--fields=26", "--test_rows=1000", "--out="+data)
	if code := gen.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("synth-ctr: exit %d", code)
	}
	return data
}

// A one-worker job in asynchronous training: the chief trains on while
// its periodic checkpoints are written (the ps cuts its state at once and
// writes it while pushes go on), where it used to wait for each, so pushes
// land during the saves; the saves keep their order, and the final one is
// saved before the job ends.
func TestOneWorkerTrainsWhileItSaves(t *testing.T) {
	data := synthCTR(t, 30000)
	dir := filepath.Join(t.TempDir(), "ckpt")
	p := start(t, "job", nil, "local", "--ps=1", "--workers=1", "--model=sparse_lr", "--optimizer=ftrl", "--input_format=criteo", "--fields=0,26",
		"--batch_size=100", "--train_data="+data, "--checkpoint_dir="+dir, "--train_steps=1500", "--save_steps=100", "--keep_checkpoints=20")
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.output())
	}
	out := p.output()
	pushes := 0
	for _, m := range regexp.MustCompile(`checkpoint: wrote shard-0-of-1\.safetensors of step \d+ .*, (\d+) pushes meanwhile`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		pushes += n
	}
	if pushes == 0 {
		t.Errorf("no push landed while a checkpoint was written: the chief waited for its saves:\n%s", out)
	}
	// Each save ends before the next begins, in step order, the last
	// the final step's.
	var steps []int
	for _, m := range regexp.MustCompile(`chief: (saving|saved) checkpoint of step (\d+)`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		if want := len(steps)%2 == 0; (m[1] == "saving") != want || (!want && n != steps[len(steps)-1]) || (want && len(steps) > 0 && n <= steps[len(steps)-1]) {
			t.Fatalf("save lines out of order at %q (steps so far %v):\n%s", m[0], steps, out)
		}
		steps = append(steps, n)
	}
	if len(steps) < 4 || steps[len(steps)-1] != 1500 {
		t.Fatalf("saves of steps %v, want several ending with the final step 1500", steps)
	}
	t.Logf("%d saves, %d pushes landed while they were written", len(steps)/2, pushes)
}
