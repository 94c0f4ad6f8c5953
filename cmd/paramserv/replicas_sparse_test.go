package main

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/vfs"
)

// sparseReplicaJob runs sparse_lr on a9a with `paramserv local --ps=3
// --workers=2 --replicas=2`, with admission (--min_count=2) and eviction,
// kill -9's ps victim (if >= 0) once a worker has logged progress, and
// returns the output; the job must end with exit 0 and without a rollback.
func sparseReplicaJob(t *testing.T, victim int, extra ...string) string {
	t.Helper()
	data := testutil.DataDir(t, "a9a/a9a")
	args := append([]string{"local", "--ps=3", "--workers=2", "--model=sparse_lr", "--replicas=2",
		"--data_dir=" + data, "--train_data=a9a/a9a", "--test_data=a9a/a9a.t", "--num_features=123",
		"--min_count=2", "--evict_after_steps=50", "--failover_timeout=1s", "--steps_to_validate=100", "--wait_log_every=1s"}, extra...)
	p := start(t, "local", nil, args...)
	if victim >= 0 {
		p.waitFor(t, "(global step: ", time.Minute)
		pid := findChild(t, p.cmd.Process.Pid, "ps", victim)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	out := p.output()
	if strings.Contains(out, "steps lost") || strings.Contains(out, "restoring") || strings.Contains(out, "every copy") {
		t.Errorf("the job rolled back or lost a shard:\n%s", out)
	}
	return out
}

// sparseStepsNeverBack checks that each worker's logged global step never
// went back, and returns worker 0's progress lines without time stamps.
func sparseStepsNeverBack(t *testing.T, out string) string {
	t.Helper()
	re := regexp.MustCompile(`\[(worker\d)\] \S+ \S+ (Worker \d+: step \d+ \(global step: (\d+)\).*)`)
	last := map[string]int64{}
	var w0 strings.Builder
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		s, _ := strconv.ParseInt(m[3], 10, 64)
		if s < last[m[1]] {
			t.Errorf("%s: global step went back from %d to %d", m[1], last[m[1]], s)
		}
		last[m[1]] = s
		if m[1] == "worker0" {
			w0.WriteString(m[2] + "\n")
		}
	}
	if len(last) == 0 {
		t.Errorf("no progress line in the output")
	}
	return w0.String()
}

// finalMetrics are the metrics of the chief's final line.
func finalMetrics(t *testing.T, out string) map[string]float64 {
	t.Helper()
	m := regexp.MustCompile(`final: .* metrics (\{.*\})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no final line:\n%s", out)
	}
	var metrics map[string]float64
	if err := json.Unmarshal([]byte(m[1]), &metrics); err != nil {
		t.Fatalf("final metrics %s: %v", m[1], err)
	}
	return metrics
}

// Sparse tables under --replicas=2, asynchronous training: ps 1 is killed
// with kill -9 while the workers push and pull rows (admission counts and
// eviction going on). The job goes on without a rollback, ps 2 takes over
// shard 1, the killed ps is started again and copies its shards back with
// their tables, no global step goes back, and the model reaches its usual
// test accuracy.
func TestReplicasSparsePSKilled(t *testing.T) {
	out := sparseReplicaJob(t, 1, "--train_steps=3000")
	for _, re := range []string{
		`ps 2 took over shard 1 at global step \d+`,
		`ps1 exited \(killed by signal killed\); its shards fail over to their copies`,
		`ps 1: re-replicated shard [01] from ps [02]: \d+ bytes`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %q:\n%s", re, out)
		}
	}
	sparseStepsNeverBack(t, out)
	m := finalMetrics(t, out)
	if m["test_accuracy"] < 0.82 {
		t.Errorf("test accuracy %.4f, want >= 0.82 (a9a, 3000 steps; undisturbed about 0.85)", m["test_accuracy"])
	}
}

// Synchronous sparse training with a fixed seed: a job whose ps 1 is
// killed with kill -9 ends with a final checkpoint byte for byte the same
// as the job undisturbed, tables included, and worker 0 logs the same
// progress (loss and bias every 100 steps) in both.
func TestReplicasSparseSyncBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("two synchronous jobs: not with -short")
	}
	dir := t.TempDir()
	var logs []string
	run := func(name string, victim int) string {
		ck := filepath.Join(dir, name)
		out := sparseReplicaJob(t, victim, "--sync_replicas", "--train_steps=1500", "--seed=3", "--checkpoint_dir="+ck)
		logs = append(logs, sparseStepsNeverBack(t, out))
		if victim >= 0 && !strings.Contains(out, "took over shard 1") {
			t.Errorf("no takeover of shard 1 logged:\n%s", out)
		}
		return filepath.Join(ck, "ckpt-1500")
	}
	calm, killed := run("calm", -1), run("killed", 1)
	if logs[0] != logs[1] {
		t.Errorf("worker 0's progress differs between the undisturbed job and the one with ps 1 killed:\n%s\nagainst\n%s", logs[0], logs[1])
	}
	sameShardFiles(t, calm, killed, "the undisturbed job and the one with ps 1 killed")
}

// Replicated shards with a disk tier on each copy (--table_memory=0: every
// row not in use is on disk, so rows move out and in all the time): ps 1
// is killed with kill -9 in a synchronous job, its shard fails over, the
// restarted ps is copied its shards back (rows on disk included) into
// stores of its own, and the final checkpoint is byte for byte the one of
// the same job undisturbed with every row in memory: nothing acknowledged
// was lost, and the tier changed no result.
func TestReplicasTieredSyncBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("two synchronous jobs: not with -short")
	}
	dir := t.TempDir()
	var logs []string
	run := func(name string, victim int, extra ...string) (string, string) {
		ck := filepath.Join(dir, name)
		out := sparseReplicaJob(t, victim, append([]string{"--sync_replicas", "--train_steps=1500", "--seed=3", "--checkpoint_dir=" + ck}, extra...)...)
		logs = append(logs, sparseStepsNeverBack(t, out))
		return filepath.Join(ck, "ckpt-1500"), out
	}
	calm, _ := run("calm", -1)
	killed, out := run("killed", 1, "--table_memory=0", "--table_dir="+filepath.Join(dir, "tables"))
	for _, re := range []string{
		`ps 1: sparse tables of its copy of shard 1 keep 0 bytes of rows in memory, the rest on disk in \S+/ps-1/shard-1`,
		`took over shard 1`,
		`ps 1: re-replicated shard [01] from ps [02]: \d+ bytes`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %q:\n%s", re, out)
		}
	}
	// The stores are scratch: each ps removed its own as it ended.
	if left, _ := filepath.Glob(filepath.Join(dir, "tables", "*")); len(left) > 0 {
		t.Errorf("the disk tiers' directories outlived the job: %v", left)
	}
	if logs[0] != logs[1] {
		t.Errorf("worker 0's progress differs between the undisturbed job all in memory and the one with a disk tier and ps 1 killed:\n%s\nagainst\n%s", logs[0], logs[1])
	}
	sameShardFiles(t, calm, killed, "the undisturbed job all in memory and the one with a disk tier and ps 1 killed")
}

// sameShardFiles checks that the final checkpoints calm and killed (the
// directories of one step's checkpoint) hold the same shards, one per ps
// at least: the same step, metadata and tensors, byte for byte, each
// sparse table's rows compared in key order. A table all in memory is
// written in its memory's order (keys_any_order) and a tiered one in key
// order, so the files themselves may differ where the rows do not. what
// names the two jobs in an error.
func sameShardFiles(t *testing.T, calm, killed, what string) {
	t.Helper()
	read := func(cdir string) []checkpoint.Shard {
		t.Helper()
		step, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(cdir), "ckpt-"), 10, 64)
		if err != nil {
			t.Fatalf("%s: not a checkpoint's directory: %v", cdir, err)
		}
		m, err := checkpoint.Load(vfs.OS, filepath.Dir(cdir), step)
		if err != nil {
			t.Fatal(err)
		}
		var shards []checkpoint.Shard
		for k := range m.Shards {
			s, err := checkpoint.ReadShardFile(vfs.OS, filepath.Dir(cdir), m, k)
			if err != nil {
				t.Fatal(err)
			}
			if s, err = checkpoint.InKeyOrder(s, m.Tables); err != nil {
				t.Fatalf("%s shard %d: %v", cdir, k, err)
			}
			shards = append(shards, s)
		}
		return shards
	}
	a, b := read(calm), read(killed)
	if len(a) < 3 || len(a) != len(b) {
		t.Fatalf("%d and %d shards in %s and %s, want the same number, one per ps at least", len(a), len(b), calm, killed)
	}
	for k := range a {
		if a[k].Step != b[k].Step {
			t.Errorf("shard %d: step %d against %d between %s", k, a[k].Step, b[k].Step, what)
		}
		if !maps.Equal(a[k].Meta, b[k].Meta) {
			t.Errorf("shard %d: metadata differs between %s:\n%v\nagainst\n%v", k, what, a[k].Meta, b[k].Meta)
		}
		if err := checkpoint.DiffTensors(a[k], b[k]); err != nil {
			t.Errorf("shard %d differs between %s: %v", k, what, err)
		}
	}
}
