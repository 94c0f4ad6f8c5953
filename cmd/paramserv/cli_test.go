package main

// First contact: --help, mistyped flags and bad values, as a user meets
// them: the exit status, the first lines of stderr, what goes to stdout.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/version"
)

// runCLI runs the binary to its end and returns its exit status, stdout
// and stderr. Every command here ends by itself within milliseconds.
func runCLI(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, o.String(), e.String()
}

// --help exits 0 everywhere and prints the help to stdout, nothing to
// stderr, and no "flag: help requested".
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"train", "--help"}, {"train", "-h"}, {"local", "--help"}, {"bench", "--help"},
		{"data", "--help"}, {"data", "fetch", "--help"}, {"data", "synth-ctr", "--help"},
		{"ckpt", "--help"}, {"ckpt", "ls", "--help"}, {"ckpt", "inspect", "--help"},
		{"eval", "--help"}, {"export", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: paramserv") && !strings.HasPrefix(out, "paramserv:") {
				t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
			}
			if strings.Contains(out, "help requested") || strings.Contains(out, "`") {
				t.Errorf("help holds the flag package's leftovers:\n%s", out)
			}
		})
	}
}

// train's help groups its flags, gives each its default, per model where
// the model decides, and shows no Go type names.
func TestTrainHelpGroups(t *testing.T) {
	_, out, _ := runCLI(t, nil, "train", "--help")
	last := -1
	for _, h := range []string{"\nCluster:\n", "\nModel and data:\n", "\nTraining:\n", "\nCheckpoints:\n",
		"\nRecovery and timeouts:\n", "\nTensorFlow compatibility (accepted, no effect):\n"} {
		i := strings.Index(out, h)
		if i < last {
			t.Errorf("heading %q missing or out of order", strings.TrimSpace(h))
		}
		last = i
	}
	for _, want := range []string{
		"--train_steps=N\n      stop when the global step reaches this (default: the model's: ", "linreg 3000", "mnist 10000", "mf 15000",
		"--startup_timeout=DURATION\n", "(default 5m0s)",
		"--save_model_secs=SECONDS|DURATION\n",
		"--batch_size=N\n      examples per batch on each worker (default 100)",
		"--data_dir=DIR\n", // was a type name from back quotes: -data_dir paramserv data fetch
	} {
		if !strings.Contains(out, want) {
			t.Errorf("train --help lacks %q", want)
		}
	}
	// The TensorFlow no-op flags come under their own heading only.
	tf := out[strings.Index(out, "\nTensorFlow compatibility"):]
	if i := strings.Index(out, "--num_gpus"); i < len(out)-len(tf) {
		t.Errorf("--num_gpus listed outside the TensorFlow heading")
	}
}

// local's help lists only what local accepts: not the cluster flags it
// chooses itself.
func TestLocalHelpListsWhatItAccepts(t *testing.T) {
	_, out, _ := runCLI(t, nil, "local", "--help")
	for _, name := range []string{"--ps_hosts", "--worker_hosts", "--job_name", "--task_index"} {
		if strings.Contains(out, name+"=") {
			t.Errorf("local --help lists %s, which local refuses", name)
		}
	}
	for _, name := range []string{"--ps=N", "--workers=N", "--train_steps=N", "--max_restarts=N"} {
		if !strings.Contains(out, name) {
			t.Errorf("local --help lacks %s", name)
		}
	}
	_, out, _ = runCLI(t, nil, "ckpt", "ls", "--help")
	if strings.Contains(out, "--step") {
		t.Errorf("ckpt ls --help shows inspect's --step:\n%s", out)
	}
}

// A mistyped flag or a bad value: the error, a suggestion when a flag is
// close, one line pointing at --help, exit 2; no screenful of help.
func TestMistypedFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // stderr's lines
	}{
		{[]string{"train", "--train_step=100"}, []string{
			"paramserv train: unknown flag --train_step",
			"did you mean --train_steps?",
			"run 'paramserv train --help' for its flags"}},
		{[]string{"local", "--bach_size=3"}, []string{
			"paramserv local: unknown flag --bach_size",
			"did you mean --batch_size?",
			"run 'paramserv local --help' for its flags"}},
		{[]string{"train", "--save_model_secs=abc"}, []string{
			`paramserv train: invalid value "abc" for flag --save_model_secs: want seconds (60) or a duration (1m30s), got "abc"`,
			"run 'paramserv train --help' for its flags"}},
		{[]string{"train", "--zzzzzz=1"}, []string{
			"paramserv train: unknown flag --zzzzzz",
			"run 'paramserv train --help' for its flags"}},
		{[]string{"bench", "--rep=3"}, []string{
			"paramserv bench: unknown flag --rep",
			"did you mean --reps?",
			"run 'paramserv bench --help' for its flags"}},
		{[]string{"data", "synth-ctr", "--test_row=3"}, []string{
			"paramserv data synth-ctr: unknown flag --test_row",
			"did you mean --test_rows?",
			"run 'paramserv data synth-ctr --help' for its flags"}},
		{[]string{"ckpt", "ls", "x", "--step=3"}, []string{
			"paramserv ckpt ls: unknown flag --step",
			"run 'paramserv ckpt ls --help' for its flags"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, c.args...)
			got := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if code != 2 || out != "" || strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("exit %d (want 2), stdout %q, stderr:\n%s\nwant:\n%s", code, out, errOut, strings.Join(c.want, "\n"))
			}
		})
	}
}

// data synth-ctr takes underscores like every other command, and still
// the hyphens it took before.
func TestSynthCTRUnderscores(t *testing.T) {
	for _, fl := range []string{"--test_rows=50", "--test-rows=50"} {
		dir := t.TempDir()
		code, out, errOut := runCLI(t, nil, "data", "synth-ctr", "--out="+dir, "--rows=200", "--shards=1", fl)
		if code != 0 || !strings.Contains(out, "wrote 200 rows in 1 shards + 50 test rows") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", fl, code, out, errOut)
		}
	}
}

// paramserv version and --version say the module version, commit, Go
// version and wire protocol; every task logs it at start.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		code, out, errOut := runCLI(t, nil, arg)
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errOut)
		}
		for _, want := range []string{"paramserv ", "\ncommit: ", "\ngo: go1.", fmt.Sprintf("\nwire protocol: %d\n", version.Protocol)} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %q:\n%s", arg, want, out)
			}
		}
	}
}

// A worker and a ps of different wire protocol versions refuse each other,
// each naming both versions; the worker exits 2 at once (input to fix)
// rather than waiting, and the ps goes on serving.
func TestProtocolVersionMismatch(t *testing.T) {
	// Protocol 1 is the paramserv before requests came in pieces (and its
	// ps read gRPC messages of up to 1 GiB).
	other := filepath.Join(t.TempDir(), "paramserv-protocol-1")
	build := exec.Command("go", "build", "-o", other,
		"-ldflags=-X github.com/paramserv/paramserv/internal/version.protocolForTests=1", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a protocol-1 paramserv: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, psBin, workerBin, psSays, workerSays string }{
		{"old worker", binary, other, "this ps speaks protocol 2", "the worker speaks protocol 1"},
		{"old ps", other, binary, "this ps speaks protocol 1", "the worker speaks protocol 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hosts := freeHosts(t, 2)
			ps := startBinary(t, c.psBin, "ps0", nil, clusterArgs(hosts[:1], hosts[1:], "ps", 0)...)
			w := startBinary(t, c.workerBin, "worker0", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 0), "--train_steps=100")...)
			if code := w.wait(t, time.Minute); code != 2 {
				t.Fatalf("worker exit %d, want 2", code)
			}
			for _, p := range []*proc{w, ps} {
				out := p.output()
				if !strings.Contains(out, "wire protocol mismatch: "+c.psSays) || !strings.Contains(out, c.workerSays) {
					t.Errorf("%s's output does not name both versions (%q, %q):\n%s", p.name, c.psSays, c.workerSays, out)
				}
			}
			select {
			case <-ps.done:
				t.Errorf("the ps exited after refusing the worker")
			default:
			}
		})
	}
}

// A flag the chosen model does not use is refused, not ignored; so is a
// batch larger than a worker's part of the data.
func TestFlagsTheModelDoesNotUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"local", "--model=linreg", "--hidden_units=50"}, "paramserv local: --hidden_units: --model=linreg does not use it (it is for deep_ctr, mnist); drop it or choose another --model\n"},
		{[]string{"train", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2", "--job_name=ps", "--model=linreg", "--train_data=a9a/a9a"},
			"paramserv train: --train_data: --model=linreg does not use it (it is for deep_ctr, lda, logreg_lbfgs, mf, sparse_lr); drop it or choose another --model\n"},
		{[]string{"local", "--model=mnist", "--min_count=2"}, "paramserv local: --min_count: --model=mnist does not use it (it is for deep_ctr, sparse_lr); drop it or choose another --model\n"},
	} {
		code, out, errOut := runCLI(t, nil, c.args...)
		if code != 2 || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d (want 2), stdout %q, stderr:\n%s\nwant:\n%s", c.args, code, out, errOut, c.want)
		}
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "train.svm")
	if err := os.WriteFile(data, []byte(strings.Repeat("1 1:1 3:1\n0 2:1\n", 5)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "local", nil, "local", "--workers=1", "--model=sparse_lr", "--train_data="+data, "--batch_size=11", "--train_steps=5")
	if code := p.wait(t, time.Minute); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if want := "sparse_lr: --batch_size=11 is larger than worker 0's part of the training data (10 examples of " + data + " over 1 workers)"; !strings.Contains(p.output(), want) {
		t.Errorf("output lacks %q", want)
	}
}

// Output paths are checked before anything trains.
func TestOutputPathsCheckedFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"local", "--result_file=/nonexistent/r.json"}, "paramserv local: --result_file=/nonexistent/r.json: its directory /nonexistent: no such file or directory\n"},
		{[]string{"local", "--result_file=" + t.TempDir()}, "is a directory, want a file name\n"},
		{[]string{"train", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2", "--job_name=worker", "--result_file=" + file + "/r.json"}, file + " is not a directory\n"},
		{[]string{"local", "--checkpoint_dir=" + file}, "--checkpoint_dir=" + file + ": is a file, want a directory\n"},
	} {
		code, _, errOut := runCLI(t, nil, c.args...)
		if code != 2 || !strings.HasSuffix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d (want 2), stderr %q, want one line ending %q", c.args, code, errOut, c.want)
		}
	}
}

// The result file records what reproduces the run, and examples_per_s is
// the job's rate, the chief's own beside it.
func TestResultFileRecordsTheRun(t *testing.T) {
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--workers=2", "--model=linreg", "--train_steps=3000", "--batch_size=50", "--seed=7", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		GlobalStep        int64 `json:"global_step"`
		LocalSteps        int64 `json:"local_steps"`
		StaleDropped      int64 `json:"stale_dropped"`
		Workers, PS       int
		ExamplesPerS      float64 `json:"examples_per_s"`
		ChiefExamplesPerS float64 `json:"chief_examples_per_s"`
		TrainingS         float64 `json:"training_s"`
		Version           string
		Flags             map[string]string
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"model": "linreg", "train_steps": "3000", "batch_size": "50", "seed": "7",
		"optimizer": "sgd", "learning_rate": "0.01", "sync_replicas": "false"} {
		if r.Flags[k] != v {
			t.Errorf("flags[%s] = %q, want %q", k, r.Flags[k], v)
		}
	}
	if _, ok := r.Flags["ps_hosts"]; ok {
		t.Errorf("flags record the cluster's ports: %v", r.Flags)
	}
	if r.Workers != 2 || r.PS != 1 || !strings.Contains(r.Version, "wire protocol 2") {
		t.Errorf("workers %d ps %d version %q", r.Workers, r.PS, r.Version)
	}
	// Async: one push per global step, from whichever worker.
	jobExamples := r.ExamplesPerS * r.TrainingS
	if want := float64((r.GlobalStep + r.StaleDropped) * 50); math.Abs(jobExamples-want) > 0.01*want {
		t.Errorf("examples_per_s × training_s = %.0f, want the job's %.0f examples", jobExamples, want)
	}
	if chief := r.ChiefExamplesPerS * r.TrainingS; math.Abs(chief-float64(r.LocalSteps*50)) > 1 {
		t.Errorf("chief_examples_per_s × training_s = %.0f, want the chief's %d examples", chief, r.LocalSteps*50)
	}
}

// SIGINT or SIGTERM to local: the workers stop, then the ps; one line says
// where training stood and the newest checkpoint; exit 130 or 143.
func TestInterruptLocal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			p := start(t, "local", nil, "local", "--workers=2", "--train_steps=1000000000", "--steps_to_validate=1000",
				"--checkpoint_dir="+ckpt, "--save_steps=500")
			p.waitCount(t, "saved checkpoint of step", 2, time.Minute)
			p.cmd.Process.Signal(sig)
			if code, want := p.wait(t, time.Minute), 128+int(sig); code != want {
				t.Fatalf("exit %d, want %d", code, want)
			}
			out := p.output()
			m := regexp.MustCompile(`\n\S+ \S+ interrupted at global step (\d+); newest checkpoint (\S+) \(step (\d+)\): the same command resumes from it\n$`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no closing line 'interrupted at global step N; newest checkpoint …'")
			}
			step, _ := strconv.Atoi(m[1])
			ck, _ := strconv.Atoi(m[3])
			if m[2] != filepath.Join(ckpt, fmt.Sprintf("ckpt-%d", ck)) || ck > step || ck < 500 {
				t.Errorf("step %d, checkpoint %s of step %d", step, m[2], ck)
			}
			// The workers were stopped before the ps.
			ps := strings.Index(out, "[ps0] ")
			if i := strings.LastIndex(out, "stopping: received SIGTERM"); i < 0 || strings.Contains(out[i:], "[worker") {
				t.Errorf("a worker still wrote after the ps was stopped (ps at %d)", ps)
			}
		})
	}
}

// local passes a child's stdout to its stdout and its stderr to its
// stderr, each line prefixed.
func TestLocalKeepsChildStreamsApart(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "local", "--workers=1", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if code != 1 || out != "[worker0] to-stdout\n" || !strings.Contains(errOut, "[worker0] to-stderr\n") || strings.Contains(errOut, "to-stdout") {
		t.Errorf("exit %d (want 1)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A host name that does not resolve is said at once, with where it came
// from and until when it is retried.
func TestUnresolvableHost(t *testing.T) {
	tf := `TF_CONFIG={"cluster":{"ps":["h0.invalid:2222"],"worker":["127.0.0.1:1"]},"task":{"type":"worker","index":0}}`
	code, _, errOut := runCLI(t, []string{tf}, "train", "--startup_timeout=1s", "--wait_log_every=10s")
	lines := strings.Split(errOut, "\n")
	if code != 1 || len(lines) < 3 ||
		!regexp.MustCompile(`^\S+ \S+ cannot resolve h0.invalid \(TF_CONFIG cluster.ps\[0\], the address of ps 0\); retrying until --startup_timeout \(1s\): lookup h0.invalid`).MatchString(lines[1]) ||
		!strings.Contains(lines[2], `failed: TF_CONFIG cluster.ps[0]: host "h0.invalid" of ps 0 (h0.invalid:2222) did not resolve within 1s`) {
		t.Errorf("exit %d (want 1), stderr:\n%s", code, errOut)
	}
}

// export writes a checkpoint's model as one safetensors file that Debian's
// python3 reads with numpy alone: a variable split over two ps joined
// whole, a sparse table's rows of both ps joined, each matching what ckpt
// inspect says of the parts. ckpt inspect takes a checkpoint's own
// directory name as ls prints it.
func TestExportSafetensors(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	testutil.DataDir(t, "mnist")
	for _, job := range []struct {
		name string
		args []string
	}{
		{"mnist", []string{"--model=mnist", "--data_dir=" + filepath.Join(data, "mnist"), "--split_bytes=100000", "--hidden_units=50"}},
		{"sparse_lr", []string{"--model=sparse_lr", "--data_dir=" + data, "--train_data=a9a/a9a", "--num_features=123"}},
	} {
		t.Run(job.name, func(t *testing.T) {
			dir := t.TempDir()
			ckpt := filepath.Join(dir, "ckpt")
			p := start(t, "local", nil, append([]string{"local", "--ps=2", "--workers=1", "--train_steps=30", "--steps_to_validate=10", "--checkpoint_dir=" + ckpt}, job.args...)...)
			if code := p.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("exit %d", code)
			}
			code, inspect, errOut := runCLI(t, nil, "ckpt", "inspect", filepath.Join(ckpt, "ckpt-30"))
			if code != 0 || !strings.HasPrefix(inspect, "ckpt-30 in "+ckpt+": step 30") {
				t.Fatalf("ckpt inspect ckpt/ckpt-30: exit %d, %s%s", code, inspect, errOut)
			}
			// Per tensor name, the parts' statistics joined.
			type agg struct{ Count, Min, Max, SumSq float64 }
			want := map[string]*agg{}
			re := regexp.MustCompile(`(?m)^\d+\s+(\S+)\s+(F32|U64|I64)\s+\[[^\]]*\]\s+count=(\d+)(?: min=(\S+) max=(\S+) mean=\S+ l2=(\S+))?`)
			for _, m := range re.FindAllStringSubmatch(inspect, -1) {
				name := m[1]
				if strings.Count(name, "/") > 0 && !strings.HasSuffix(name, "/keys") && !strings.HasSuffix(name, "/values") {
					continue // optimizer state, not exported by default
				}
				a := want[name]
				if a == nil {
					a = &agg{Min: math.Inf(1), Max: math.Inf(-1)}
					want[name] = a
				}
				n, _ := strconv.ParseFloat(m[3], 64)
				a.Count += n
				if m[4] != "" {
					lo, _ := strconv.ParseFloat(m[4], 64)
					hi, _ := strconv.ParseFloat(m[5], 64)
					l2, _ := strconv.ParseFloat(m[6], 64)
					a.Min, a.Max, a.SumSq = min(a.Min, lo), max(a.Max, hi), a.SumSq+l2*l2
				}
			}
			if _, ok := want[map[string]string{"mnist": "hid_w", "sparse_lr": "weights/values"}[job.name]]; !ok || len(want) < 2 {
				t.Fatalf("read %d tensors from ckpt inspect:\n%s", len(want), inspect)
			}
			out := filepath.Join(dir, "model.safetensors")
			if code, o, e := runCLI(t, nil, "export", "--checkpoint_dir="+ckpt, "--out="+out); code != 0 {
				t.Fatalf("export: exit %d: %s%s", code, o, e)
			}
			py := exec.Command("/usr/bin/python3", "-c", `
import json, struct, sys, numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8+n]); h.pop("__metadata__", None)
out = {}
for name, t in h.items():
    lo, hi = t["data_offsets"]
    a = np.frombuffer(b[8+n+lo:8+n+hi], dtype={"F32": "<f4", "I64": "<i8"}[t["dtype"]]).reshape(t["shape"])
    f = a.astype(np.float64)
    out[name] = {"shape": list(a.shape), "count": int(a.size), "min": float(f.min()), "max": float(f.max()), "l2": float(np.sqrt((f*f).sum())), "unique": int(np.unique(a).size)}
print(json.dumps(out))
`, out)
			pyOut, err := py.CombinedOutput()
			if err != nil {
				t.Fatalf("python3 reading %s: %v\n%s", out, err, pyOut)
			}
			var got map[string]struct {
				Shape        []int
				Count        float64
				Min, Max, L2 float64
				Unique       int
			}
			if err := json.Unmarshal(pyOut, &got); err != nil {
				t.Fatalf("%v: %s", err, pyOut)
			}
			close := func(a, b float64) bool { return math.Abs(a-b) <= 2e-5*math.Max(1, math.Abs(b)) }
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("%s: not in the exported file (has %v)", name, got)
					continue
				}
				if g.Count != w.Count || (!strings.HasSuffix(name, "/keys") && (!close(g.Min, w.Min) || !close(g.Max, w.Max) || !close(g.L2, math.Sqrt(w.SumSq)))) {
					t.Errorf("%s: numpy read %+v; ckpt inspect's parts say count %v min %v max %v l2 %v", name, g, w.Count, w.Min, w.Max, math.Sqrt(w.SumSq))
				}
				if strings.HasSuffix(name, "/keys") && float64(g.Unique) != g.Count {
					t.Errorf("%s: %v keys but %d distinct: a key on two ps", name, g.Count, g.Unique)
				}
			}
			// Each part sits at its rows: the rows the manifest gives a
			// shard, read back from the file, have that shard's statistics.
			var man struct {
				Variables []struct {
					Name  string
					Parts []struct {
						Shard int
						Rows  []int64
					}
				}
			}
			if b, err := os.ReadFile(filepath.Join(ckpt, "ckpt-30", "manifest.json")); err != nil || json.Unmarshal(b, &man) != nil {
				t.Fatalf("manifest: %v", err)
			}
			split := 0
			for _, v := range man.Variables {
				for _, part := range v.Parts {
					if len(part.Rows) != 2 {
						continue
					}
					split++
					py := exec.Command("/usr/bin/python3", "-c", `
import json, struct, sys, numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8+n])[sys.argv[2]]
lo, hi = t["data_offsets"]
a = np.frombuffer(b[8+n+lo:8+n+hi], dtype="<f4").reshape(t["shape"])[int(sys.argv[3]):int(sys.argv[4])].astype(np.float64)
print(json.dumps([float(a.min()), float(a.max()), float(np.sqrt((a*a).sum()))]))
`, out, v.Name, fmt.Sprint(part.Rows[0]), fmt.Sprint(part.Rows[1]))
					b, err := py.CombinedOutput()
					var mm []float64
					if err != nil || json.Unmarshal(b, &mm) != nil {
						t.Fatalf("python3: %v: %s", err, b)
					}
					line := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+F32\s+\[[^\]]*\]\s+count=\d+ min=(\S+) max=(\S+) mean=\S+ l2=(\S+)`, part.Shard, regexp.QuoteMeta(v.Name))).FindStringSubmatch(inspect)
					if line == nil {
						t.Fatalf("ckpt inspect has no line for %s on shard %d", v.Name, part.Shard)
					}
					for i, g := range mm {
						w, _ := strconv.ParseFloat(line[i+1], 64)
						if !close(g, w) {
							t.Errorf("%s rows %v (shard %d): numpy reads min, max, l2 %v; ckpt inspect says %v", v.Name, part.Rows, part.Shard, mm, line[1:])
							break
						}
					}
				}
			}
			if job.name == "mnist" {
				if split < 2 {
					t.Errorf("no variable split over the two ps; the test checks no join")
				}
				if g := got["hid_w"]; fmt.Sprint(g.Shape) != "[784 50]" {
					t.Errorf("hid_w has shape %v, want [784 50] (joined from its parts)", g.Shape)
				}
			}
		})
	}
}

// eval gives a checkpoint the metrics training gave it at the end, and
// writes the same result file; a checkpoint of another model is refused.
func TestEvalCheckpoint(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	dir := t.TempDir()
	ckpt, res, evalRes := filepath.Join(dir, "ckpt"), filepath.Join(dir, "train.json"), filepath.Join(dir, "eval.json")
	model := []string{"--model=sparse_lr", "--data_dir=" + data, "--train_data=a9a/a9a", "--test_data=a9a/a9a.t", "--num_features=123"}
	p := start(t, "local", nil, append([]string{"local", "--ps=2", "--workers=1", "--train_steps=60", "--steps_to_validate=20",
		"--checkpoint_dir=" + ckpt, "--result_file=" + res}, model...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	code, out, errOut := runCLI(t, nil, append([]string{"eval", "--checkpoint_dir=" + filepath.Join(ckpt, "ckpt-60"), "--result_file=" + evalRes}, model...)...)
	if code != 0 || out != "" || !strings.Contains(errOut, "eval of "+filepath.Join(ckpt, "ckpt-60")+": global step 60, async, metrics {") {
		t.Fatalf("eval: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	type result struct {
		Model      string             `json:"model"`
		GlobalStep int64              `json:"global_step"`
		Metrics    map[string]float64 `json:"metrics"`
		TestAUC    float64            `json:"test_auc"`
	}
	var tr, ev result
	for path, r := range map[string]*result{res: &tr, evalRes: &ev} {
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, r) != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	if ev.Model != "sparse_lr" || ev.GlobalStep != 60 || len(ev.Metrics) < 3 || len(tr.Metrics) != len(ev.Metrics) || ev.TestAUC < 0.8 {
		t.Errorf("eval result %+v", ev)
	}
	for k, v := range tr.Metrics {
		if math.Abs(ev.Metrics[k]-v) > 1e-9 {
			t.Errorf("metric %s: eval %v, training's end %v", k, ev.Metrics[k], v)
		}
	}
	code, _, errOut = runCLI(t, nil, "eval", "--checkpoint_dir="+ckpt, "--model=linreg")
	if code != 2 || !strings.Contains(errOut, `has no variable "weight": it holds another model than --model=linreg`) {
		t.Errorf("eval of a sparse_lr checkpoint as linreg: exit %d, stderr:\n%s", code, errOut)
	}
}

// data fetch knows every data set the README and the tests use, writes
// to $PARAMSERV_DATA by default, and --train_data resolves there too.
func TestDataFetchAndPARAMSERV_DATA(t *testing.T) {
	data := testutil.DataDir(t, "SHA256SUMS")
	env := []string{"PARAMSERV_DATA=" + data}
	for _, ds := range []string{"mnist", "fashion-mnist", "a9a", "ml-100k", "ap"} {
		// Every file is there and valid: nothing is downloaded.
		code, out, errOut := runCLI(t, env, "data", "fetch", ds)
		if code != 0 || out != ds+" is in "+data+"\n" || strings.Contains(errOut, "downloading") {
			t.Errorf("data fetch %s: exit %d, stdout %q, stderr:\n%s", ds, code, out, errOut)
		}
	}
	code, out, errOut := runCLI(t, env, "local", "--workers=1", "--model=sparse_lr", "--train_data=a9a/a9a", "--test_data=a9a/a9a.t", "--train_steps=10")
	if code != 0 {
		t.Errorf("sparse_lr with --train_data=a9a/a9a under PARAMSERV_DATA: exit %d\n%s%s", code, out, errOut)
	}
}
