package main

import (
	"bytes"
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

// replicaJob runs `paramserv local` with --replicas=2 on 3 ps and 2
// workers, kill -9's ps victim (if >= 0) once a worker has logged progress,
// and returns the output; the job must end with exit 0.
func replicaJob(t *testing.T, victim int, extra ...string) string {
	t.Helper()
	args := append([]string{"local", "--ps=3", "--workers=2", "--model=linreg", "--replicas=2",
		"--failover_timeout=500ms", "--steps_to_validate=100", "--wait_log_every=1s"}, extra...)
	p := start(t, "local", nil, args...)
	if victim >= 0 {
		p.waitFor(t, "step: ", time.Minute)
		pid := findChild(t, p.cmd.Process.Pid, "ps", victim)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.output()
	if strings.Contains(out, "steps lost") || strings.Contains(out, "restoring") {
		t.Errorf("the job rolled back:\n%s", out)
	}
	return out
}

// checkStepsNeverBack checks that each worker's logged global step never
// went back.
func checkStepsNeverBack(t *testing.T, out string) {
	t.Helper()
	re := regexp.MustCompile(`\[(worker\d)\] \S+ \S+ step: (\d+),`)
	last := map[string]int64{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		s, _ := strconv.ParseInt(m[2], 10, 64)
		if s < last[m[1]] {
			t.Errorf("%s: global step went back from %d to %d", m[1], last[m[1]], s)
		}
		last[m[1]] = s
	}
	if len(last) == 0 {
		t.Errorf("no progress line in the output")
	}
}

// A ps killed with kill -9 under --replicas=2, asynchronous training: the
// job goes on without a restart or a rollback, the log says who took over
// which shard, and linreg reaches its usual fit. With -short ps 1 only,
// otherwise each ps in turn (one job each).
func TestReplicasPSKilledAsync(t *testing.T) {
	victims := []int{1}
	if !testing.Short() {
		victims = []int{0, 1, 2}
	}
	for _, v := range victims {
		t.Run(fmt.Sprintf("ps%d", v), func(t *testing.T) {
			dir := t.TempDir()
			res := filepath.Join(dir, "result.json")
			out := replicaJob(t, v, "--train_steps=3000", "--result_file="+res)
			if want := fmt.Sprintf("ps %d took over shard %d at global step", (v+1)%3, v); !strings.Contains(out, want) {
				t.Errorf("no line %q:\n%s", want, out)
			}
			if want := fmt.Sprintf("ps%d exited (killed by signal killed); its shards fail over to their copies", v); !strings.Contains(out, want) {
				t.Errorf("ps %d's death not reported:\n%s", v, out)
			}
			checkStepsNeverBack(t, out)
			r := readResult(t, res)
			checkLinreg(t, r)
			if r.GlobalStep < 3000 {
				t.Errorf("global step %d, want >= 3000", r.GlobalStep)
			}
		})
	}
}

// Re-replication: ps 1 is killed with kill -9 under --replicas=2; local
// starts it again, and it copies its two shards back from their primaries
// while training goes on (the log says so, with the bytes and the rate).
// Then ps 0 is killed, the primary of shard 0, which ps 1 backs again: ps 1
// takes it over and the job ends with exit 0 and no rollback, which it
// could not if the copy had not been restored (shard 0 would have none
// left).
func TestReplicasPSRejoins(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=3", "--workers=1", "--model=linreg", "--replicas=2",
		"--failover_timeout=300ms", "--steps_to_validate=100", "--wait_log_every=1s", "--train_steps=10000", "--result_file="+res)
	p.waitFor(t, "step: ", time.Minute)
	if err := syscall.Kill(findChild(t, p.cmd.Process.Pid, "ps", 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "ps 1: re-replicated shard 0 from ps 0", time.Minute)
	p.waitFor(t, "ps 1: re-replicated shard 1 from ps 2", time.Minute)
	if strings.Contains(p.output(), "exited 0") {
		t.Fatalf("the job ended before the second kill: give it more steps\n%s", p.output())
	}
	if err := syscall.Kill(findChild(t, p.cmd.Process.Pid, "ps", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	out := p.output()
	for _, re := range []string{
		`ps1 exited \(killed by signal killed\); .*restarting it to copy them back`,
		`ps 1: re-replicated shard [01] from ps [02]: \d+ bytes in \S+ \([\d.]+ MB/s\), 2 copies again`,
		`ps 1 took over shard 0 at global step \d+`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %q:\n%s", re, out)
		}
	}
	if strings.Contains(out, "steps lost") || strings.Contains(out, "restoring") || strings.Contains(out, "every copy") {
		t.Errorf("the job rolled back or lost a shard:\n%s", out)
	}
	checkStepsNeverBack(t, out)
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.GlobalStep < 10000 {
		t.Errorf("global step %d, want >= 10000", r.GlobalStep)
	}
}

// Checkpoint fallback: ps 0 and ps 1 are killed with kill -9 at once
// under --replicas=2 on 3 ps. Shard 0 had both its copies on them, and
// ps 2 alone is no majority. local starts both again; once they are up,
// ps 2 re-forms the cluster, every copy restores the newest checkpoint,
// the log says which shard was lost and how many steps, and the job ends
// with exit 0 at its goal.
func TestReplicasTwoKilledFallBack(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=3", "--workers=1", "--model=linreg", "--replicas=2",
		"--failover_timeout=300ms", "--steps_to_validate=100", "--wait_log_every=1s", "--train_steps=3000",
		"--checkpoint_dir="+filepath.Join(dir, "ck"), "--save_steps=200", "--result_file="+res)
	p.waitFor(t, "chief: saved checkpoint of step 200", time.Minute)
	pid0, pid1 := findChild(t, p.cmd.Process.Pid, "ps", 0), findChild(t, p.cmd.Process.Pid, "ps", 1)
	for _, pid := range []int{pid0, pid1} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	out := p.output()
	re := regexp.MustCompile(`ps 2: every copy of shard 0 lost \(ps 0 and 1\); falling back to the checkpoint of step (\d+); (\d+) steps lost`)
	if m := re.FindStringSubmatch(out); m == nil {
		t.Errorf("no line matching %q:\n%s", re, out)
	} else if n, _ := strconv.Atoi(m[1]); n < 200 {
		t.Errorf("fell back to the checkpoint of step %d, want the one of step 200 or later:\n%s", n, out)
	}
	if os.Getenv("PARAMSERV_TEST_SHOW") != "" {
		t.Log(out)
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.GlobalStep < 3000 {
		t.Errorf("global step %d, want >= 3000", r.GlobalStep)
	}
}

// Synchronous training with a fixed seed: a job whose ps 1 is killed with
// kill -9 ends with a final checkpoint byte for byte the same as the job
// undisturbed (every step applied once, each worker's gradient sent again
// unchanged after the failover).
func TestReplicasPSKilledSyncBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("two synchronous jobs: not with -short")
	}
	dir := t.TempDir()
	var logs []string
	run := func(name string, victim int) string {
		ck := filepath.Join(dir, name)
		out := replicaJob(t, victim, "--sync_replicas", "--train_steps=1500", "--seed=3", "--checkpoint_dir="+ck)
		logs = append(logs, progressLines(out))
		return filepath.Join(ck, "ckpt-1500")
	}
	calm, killed := run("calm", -1), run("killed", 1)
	// The run converges to the same final bytes even from slightly
	// different parameters, so the values on the way must match too: each
	// progress line (parameters and loss every 100 steps) is the same.
	if logs[0] != logs[1] {
		t.Errorf("worker 0's progress differs between the undisturbed job and the one with ps 1 killed:\n%s\nagainst\n%s", logs[0], logs[1])
	}
	for i := range 3 {
		name := "shard-" + strconv.Itoa(i) + "-of-3.safetensors"
		a, err := os.ReadFile(filepath.Join(calm, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(killed, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the undisturbed job and the one with ps 1 killed", name)
		}
	}
}

// progressLines are worker 0's progress lines (step, parameters, loss),
// without their time stamps.
func progressLines(out string) string {
	var b strings.Builder
	for _, m := range regexp.MustCompile(`\[worker0\] \S+ \S+ (step: .*)`).FindAllStringSubmatch(out, -1) {
		b.WriteString(m[1] + "\n")
	}
	return b.String()
}

// Models other than linreg, mnist and sparse_lr are refused under
// --replicas for now (exit 2), and so are --replicas=0 and more copies
// than ps.
func TestReplicasRefused(t *testing.T) {
	for _, args := range [][]string{
		{"local", "--ps=3", "--workers=1", "--model=lda", "--replicas=2"},
		{"local", "--ps=3", "--workers=1", "--model=linreg", "--replicas=0"},
		{"local", "--ps=2", "--workers=1", "--model=linreg", "--replicas=3"},
	} {
		p := start(t, "local", nil, args...)
		if code := p.wait(t, time.Minute); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, p.output())
		}
	}
}

// --replicas with --tls_dir: the copies' listeners and the ps's
// replication connections go through the same TLS seam as the rest. ps 1
// is killed with kill -9; its shards fail over, it is started again and
// re-replicates over TLS, and the job ends with exit 0.
func TestReplicasWithTLS(t *testing.T) {
	certs := makeCerts(t, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, []string{"127.0.0.1"})
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=3", "--workers=1", "--model=linreg", "--replicas=2", "--tls_dir="+certs,
		"--failover_timeout=300ms", "--steps_to_validate=100", "--wait_log_every=1s", "--train_steps=10000", "--result_file="+res)
	p.waitFor(t, "step: ", time.Minute)
	if err := syscall.Kill(findChild(t, p.cmd.Process.Pid, "ps", 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The copies come back while the job trains (10,000 steps leave it
	// seconds to spare on a loaded machine); a job that ends first fails
	// here, saying so, rather than in a search of the final log.
	p.waitFor(t, "ps 1: re-replicated shard 0 from ps 0", time.Minute)
	p.waitFor(t, "ps 1: re-replicated shard 1 from ps 2", time.Minute)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	out := p.output()
	for _, want := range []string{"connections require", "ps 2 took over shard 1 at global step", "ps 1: re-replicated shard 0 from ps 0", "ps 1: re-replicated shard 1 from ps 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "steps lost") || strings.Contains(out, "restoring") {
		t.Errorf("the job rolled back:\n%s", out)
	}
	checkLinreg(t, readResult(t, res))
}
