package main

// Integration tests: the real binary, as separate OS processes, on loopback
// sockets.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paramserv-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "paramserv")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building paramserv:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a started paramserv process whose output is collected.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, binary, name, env, args...)
}

// startBinary is start with another build of paramserv.
func startBinary(t *testing.T, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReader(pipe)
		for {
			line, err := r.ReadString('\n')
			p.mu.Lock()
			p.out.WriteString(line)
			p.mu.Unlock()
			if err != nil {
				break
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// wait waits for the process to exit (at most limit, a guard against a hang
// rather than a performance assertion) and returns its exit code.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("%s still running after %s", p.name, limit)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v", p.name, p.err)
	return -1
}

// waitFor waits until the process's output contains s.
func (p *proc) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never printed %q", p.name, s)
		}
		select {
		case <-p.done:
			if !strings.Contains(p.output(), s) {
				t.Fatalf("%s exited without printing %q", p.name, s)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type result struct {
	Model          string  `json:"model"`
	Mode           string  `json:"mode"`
	GlobalStep     int64   `json:"global_step"`
	StaleDropped   int64   `json:"stale_dropped"`
	RejectedPushes int64   `json:"rejected_pushes"`
	Weight         float64 `json:"weight"`
	Bias           float64 `json:"bias"`
	Loss           float64 `json:"loss"`
	ElapsedS       float64 `json:"elapsed_s"`
}

func readResult(t *testing.T, path string) result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("result file: %v", err)
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result file %s: %v", b, err)
	}
	return r
}

func checkLinreg(t *testing.T, r result) {
	t.Helper()
	if math.Abs(r.Weight-2) > 0.05 || math.Abs(r.Bias-10) > 0.1 {
		t.Errorf("weight %.4f bias %.4f, want 2±0.05 and 10±0.1", r.Weight, r.Bias)
	}
}

func TestLocalAsyncLinreg(t *testing.T) {
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--model=linreg", "--train_steps=3000", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.Mode != "async" || r.GlobalStep < 3000 || r.Model != "linreg" {
		t.Errorf("result %+v", r)
	}
	out := p.output()
	for _, want := range []string{"[ps0] ", "[ps1] ", "[worker0] ", "[worker1] ", "all 4 processes exited 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The TensorFlow example's progress line (global step: async workers
	// interleave, so any step).
	if !regexp.MustCompile(`step: \d+, weight: \d+\.\d+, bias: \d+\.\d+, loss: \d+\.\d+`).MatchString(out) {
		t.Errorf("output lacks the progress line step: N, weight: W, bias: B, loss: L")
	}
}

func TestLocalSyncLinreg(t *testing.T) {
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--model=linreg", "--train_steps=3000", "--sync_replicas", "--result_file="+res)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	// With every worker needed for every step, no gradient can be stale and
	// the step stops exactly at the goal.
	if r.Mode != "sync" || r.GlobalStep != 3000 || r.StaleDropped != 0 {
		t.Errorf("result %+v, want sync, global step 3000, 0 stale", r)
	}
}

// freeHosts returns n free loopback host:port addresses.
func freeHosts(t *testing.T, n int) []string {
	t.Helper()
	ports, err := local.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	hosts := make([]string, n)
	for i, p := range ports {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return hosts
}

func TestTFConfigClusterByHand(t *testing.T) {
	hosts := freeHosts(t, 4)
	ps, workers := hosts[:2], hosts[2:]
	res := filepath.Join(t.TempDir(), "result.json")
	tfConfig := func(job string, i int) []string {
		c, _ := json.Marshal(map[string]any{
			"cluster": map[string]any{"ps": ps, "worker": workers},
			"task":    map[string]any{"type": job, "index": i},
		})
		return []string{"TF_CONFIG=" + string(c)}
	}
	var procs []*proc
	for i := range ps {
		procs = append(procs, start(t, fmt.Sprintf("ps%d", i), tfConfig("ps", i), "train"))
	}
	for i := range workers {
		args := []string{"train", "--model=linreg", "--train_steps=2000"}
		if i == 0 {
			args = append(args, "--result_file="+res)
		}
		procs = append(procs, start(t, fmt.Sprintf("worker%d", i), tfConfig("worker", i), args...))
	}
	for _, p := range procs {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	checkLinreg(t, readResult(t, res))
}

func clusterArgs(ps, workers []string, job string, i int) []string {
	return []string{"train", "--ps_hosts=" + strings.Join(ps, ","), "--worker_hosts=" + strings.Join(workers, ","),
		"--job_name=" + job, fmt.Sprintf("--task_index=%d", i), "--wait_log_every=200ms"}
}

func TestWorkersStartedBeforePS(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	res := filepath.Join(t.TempDir(), "result.json")
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), "--train_steps=1000", "--result_file="+res)...)
	w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), "--train_steps=1000")...)
	w0.waitFor(t, "waiting for ps 0 at "+ps[0], 30*time.Second)
	w1.waitFor(t, "waiting for ps 0 at "+ps[0], 30*time.Second)
	p0 := start(t, "ps0", nil, clusterArgs(ps, workers, "ps", 0)...)
	for _, p := range []*proc{w0, w1, p0} {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	if r := readResult(t, res); r.GlobalStep < 1000 {
		t.Fatalf("global step %d", r.GlobalStep)
	}
}

func TestStartupTimeout(t *testing.T) {
	hosts := freeHosts(t, 2)
	w := start(t, "worker0", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 0), "--startup_timeout=1s")...)
	if code := w.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if out := w.output(); !strings.Contains(out, "gave up waiting for ps 0 at "+hosts[0]) || !strings.Contains(out, "--startup_timeout=1s passed") {
		t.Fatalf("output does not say what it waited for:\n%s", out)
	}
}

// A worker whose ps is there but whose chief never comes gives up naming
// the chief's initialisation, not the ps (the wait's end used to cut the
// long poll of the ps and blame it: "gave up waiting for ps 0 ...
// DeadlineExceeded").
func TestStartupTimeoutWaitingForTheChief(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps := start(t, "ps0", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), "--startup_timeout=1m")...)
	ps.waitFor(t, "serving on", time.Minute)
	w := start(t, "worker1", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 1), "--startup_timeout=2s")...)
	if code := w.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	out := w.output()
	if !strings.Contains(out, "gave up waiting for the chief to initialise ps 0 at "+hosts[0]+": --startup_timeout=2s passed") {
		t.Fatalf("output does not say it waited for the chief:\n%s", out)
	}
}

// A malformed push from a misbehaving client is refused with an error that
// names the variable; training carries on and the count is reported.
func TestBadPushRejectedWhileTrainingGoesOn(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	res := filepath.Join(t.TempDir(), "result.json")
	p0 := start(t, "ps0", nil, clusterArgs(ps, workers, "ps", 0)...)
	// Synchronous, and worker 1 not started yet: the chief initialises and
	// then waits at step 0, so the bad pushes land mid-job, deterministically.
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), "--sync_replicas", "--train_steps=500", "--result_file="+res)...)
	w0.waitFor(t, "chief initialised", 30*time.Second)

	conn, err := grpc.NewClient(ps[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewParamServerClient(conn)
	nan := float32(math.NaN())
	for _, tc := range []struct {
		grads []*pb.DenseTensor
		want  string
	}{
		{[]*pb.DenseTensor{{Name: "nope", Data: wire.Float32Bytes([]float32{1})}}, `unknown variable "nope"`},
		{[]*pb.DenseTensor{{Name: "weight", Data: wire.Float32Bytes([]float32{1, 2})}, {Name: "bias", Data: wire.Float32Bytes([]float32{1})}}, `variable "weight": gradient has 8 bytes, want 4`},
		{[]*pb.DenseTensor{{Name: "weight", Data: wire.Float32Bytes([]float32{nan})}, {Name: "bias", Data: wire.Float32Bytes([]float32{1})}}, `variable "weight": gradient element 0 is NaN`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Push(ctx, &pb.PushRequest{Worker: 1, Step: 0, Grads: tc.grads})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want InvalidArgument naming %q", err, tc.want)
		}
	}
	w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), "--sync_replicas", "--train_steps=500")...)
	for _, p := range []*proc{w0, w1, p0} {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	r := readResult(t, res)
	if r.RejectedPushes != 3 || r.GlobalStep != 500 {
		t.Errorf("result %+v, want 3 rejected pushes and global step 500", r)
	}
	if !strings.Contains(p0.output(), "rejected pushes so far: 3") {
		t.Errorf("ps log does not count the rejected pushes")
	}
}

func TestBadInputExitsTwo(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"malformed host list", nil, []string{"train", "--ps_hosts=localhost", "--worker_hosts=127.0.0.1:1", "--job_name=ps"}, `entry 1 "localhost" is not host:port`},
		{"index out of range", nil, []string{"train", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2", "--job_name=worker", "--task_index=3"}, "task index 3 out of range"},
		{"unknown job", nil, []string{"train", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2", "--job_name=boss"}, `"boss" is not a job`},
		{"invalid TF_CONFIG", []string{`TF_CONFIG={"cluster": {"ps": ["a:1"]`}, []string{"train"}, "TF_CONFIG"},
		{"port in use", nil, []string{"train", "--ps_hosts=" + busy.Addr().String(), "--worker_hosts=127.0.0.1:2", "--job_name=ps"}, "cannot listen on " + busy.Addr().String()},
		{"unknown optimizer", nil, []string{"local", "--optimizer=adamax"}, `unknown optimizer "adamax"`},
		{"unknown model", nil, []string{"local", "--model=gpt"}, `unknown model "gpt"`},
		{"unknown flag", nil, []string{"train", "--nope=1"}, "unknown flag --nope"},
		{"unknown command", nil, []string{"serve"}, `unknown command "serve"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.name, tc.env, tc.args...)
			if code := p.wait(t, 30*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, p.output())
			}
			if out := p.output(); !strings.Contains(out, tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// Ctrl-C stops every process of a local cluster, and a local cluster killed
// outright leaves no child behind either.
func TestLocalStopsEveryChild(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--train_steps=1000000000", "--steps_to_validate=1000")
			p.waitFor(t, "step: ", time.Minute)
			children := childrenOf(p.cmd.Process.Pid)
			if len(children) != 3 {
				t.Fatalf("local has children %v, want 3", children)
			}
			p.cmd.Process.Signal(sig)
			code := p.wait(t, time.Minute)
			if sig == syscall.SIGINT && (code != 130 || !strings.Contains(p.output(), "interrupted")) {
				t.Fatalf("after SIGINT: exit %d, output:\n%s", code, p.output())
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, pid := range children {
				for alive(pid) {
					if time.Now().After(deadline) {
						t.Fatalf("child %d outlived paramserv local", pid)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// childrenOf lists the pids whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var child int
		if _, err := fmt.Sscanf(e.Name(), "%d", &child); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(b[bytes.LastIndexByte(b, ')')+2:])
		var state string
		var ppid int
		if _, err := fmt.Sscanf(rest, "%s %d", &state, &ppid); err == nil && ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	return !strings.HasPrefix(rest, "Z")
}

// Sparse logistic regression on a9a over 2 ps and 2 workers, FTRL, as the
// README runs it: trained on a9a alone, tested on a9a.t. Five runs
// measured test accuracy 84.91% to 85.10%, AUC 0.9016 to 0.9020, log loss
// 0.3246 to 0.3256; the floors sit a little below.
func TestSparseLRA9A(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	res := filepath.Join(t.TempDir(), "result.json")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--model=sparse_lr", "--optimizer=ftrl",
		"--train_data=a9a/a9a", "--test_data=a9a/a9a.t", "--input_format=libsvm", "--num_features=123", "--data_dir="+data, "--result_file="+res)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		TestAccuracy float64 `json:"test_accuracy"`
		TestAUC      float64 `json:"test_auc"`
		TestLogLoss  float64 `json:"test_log_loss"`
		Tables       []struct {
			PS   int   `json:"ps"`
			Rows int64 `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.TestAccuracy < 0.847 || r.TestAUC < 0.900 || r.TestLogLoss > 0.330 {
		t.Errorf("test accuracy %.4f AUC %.4f log loss %.4f, want >= 0.847, >= 0.900 and <= 0.330", r.TestAccuracy, r.TestAUC, r.TestLogLoss)
	}
	if out := p.output(); !strings.Contains(out, "worker 0 has 16281 training examples") || !strings.Contains(out, "worker 1 has 16280 training examples") {
		t.Errorf("the workers did not train on a9a's 32,561 rows alone")
	}
	// a9a uses 123 feature ids (the test set 122 of them): all trained
	// rows exist, spread over both shards.
	if len(r.Tables) != 2 || r.Tables[0].Rows+r.Tables[1].Rows != 123 || r.Tables[0].Rows == 0 || r.Tables[1].Rows == 0 {
		t.Errorf("table shards %+v, want 123 rows over 2 ps", r.Tables)
	}
}

// A malformed data line is input to fix: the worker exits 2, and so does
// local, naming the file, line and token, and the failed worker, whether
// the files are loaded at start or streamed (--shuffle_buffer, the line
// found while training); with --skip_bad_lines it is skipped and training
// goes on.
func TestSparseLRBadDataLine(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.svm")
	os.WriteFile(train, []byte("+1 1:1 3:1\n-1 2:1\n+1 1:1 3:oops\n-1 2:1 4:1\n"), 0o644)
	for _, workers := range []string{"--workers=1", "--workers=2", "--workers=1 --shuffle_buffer=2"} {
		args := append([]string{"local", "--ps=1"}, strings.Fields(workers)...)
		p := start(t, "local", nil, append(args, "--model=sparse_lr", "--train_data="+train, "--train_steps=20", "--batch_size=1")...)
		if code := p.wait(t, time.Minute); code != 2 {
			t.Fatalf("%s: exit %d, want 2", workers, code)
		}
		out := strings.TrimSpace(p.output())
		last := out[strings.LastIndexByte(out, '\n')+1:]
		if !strings.Contains(out, "train.svm:3") || !strings.Contains(out, `"3:oops"`) ||
			!regexp.MustCompile(`local: worker\d failed: exit status 2 \(input to fix\)`).MatchString(last) {
			t.Fatalf("%s: output does not name the file, line and token, or its last line the failed worker:\n%s", workers, out)
		}
	}
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--model=sparse_lr", "--train_data="+train, "--train_steps=20", "--batch_size=2", "--skip_bad_lines")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("with --skip_bad_lines: exit %d", code)
	}
	if out := p.output(); !strings.Contains(out, "skipped 1 malformed lines of 4") {
		t.Fatalf("skipped line not counted:\n%s", out)
	}
}

// --epochs=1: each worker reads its part once (101 rows split by line:
// 51 and 50, batches of 10: 6 and 5 steps) and is done far below
// --train_steps; the job exits 0 and the chief's result holds every step.
func TestSparseLREpochs(t *testing.T) {
	var b strings.Builder
	for i := range 101 {
		fmt.Fprintf(&b, "%s %d:1 %d:0.5\n", []string{"-1", "+1"}[i/2%2], i%40+1, 41+i%7)
	}
	dir := t.TempDir()
	train, res := filepath.Join(dir, "train.svm"), filepath.Join(dir, "result.json")
	if err := os.WriteFile(train, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, buffer := range []string{"--shuffle_buffer=0", "--shuffle_buffer=16"} {
		p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=sparse_lr", "--optimizer=ftrl", "--train_data="+train,
			"--epochs=1", "--train_steps=1000000", "--batch_size=10", buffer, "--result_file="+res)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("%s: exit %d:\n%s", buffer, code, p.output())
		}
		out := p.output()
		if !strings.Contains(out, "worker 0: end of data after 1 epochs at global step") || !strings.Contains(out, "worker 1: end of data after 1 epochs at global step") {
			t.Fatalf("%s: the workers do not say their data ended:\n%s", buffer, out)
		}
		if r := readResult(t, res); r.GlobalStep != 11 {
			t.Fatalf("%s: global step %d, want 11 (6 + 5 steps)", buffer, r.GlobalStep)
		}
	}
}

type mnistResult struct {
	Mode         string  `json:"mode"`
	GlobalStep   int64   `json:"global_step"`
	TestAccuracy float64 `json:"test_accuracy"`
	ValAccuracy  float64 `json:"val_accuracy"`
	ValXent      float64 `json:"val_cross_entropy"`
	ExamplesPerS float64 `json:"examples_per_s"`
}

func runMNIST(t *testing.T, dataset string, args ...string) mnistResult {
	t.Helper()
	data := testutil.DataDir(t, dataset)
	res := filepath.Join(t.TempDir(), "result.json")
	args = append([]string{"local", "--ps=1", "--workers=2", "--model=mnist", "--dataset=" + dataset, "--data_dir=" + data, "--result_file=" + res}, args...)
	p := start(t, "local", nil, args...)
	if code := p.wait(t, 9*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := p.output()
	for _, want := range []string{"Worker 1: training step ", "Training elapsed time: ", "validation cross entropy = "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r mnistResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v: %+v", dataset, args[7:], r)
	return r
}

// A short run in both modes clears a floor well above chance: the whole
// MNIST path (data, MLP, Adam on the ps, evaluation) works.
func TestMNISTShort(t *testing.T) {
	for _, mode := range []string{"--sync_replicas=false", "--sync_replicas"} {
		r := runMNIST(t, "mnist", "--train_steps=400", "--steps_to_validate=50", mode)
		if r.TestAccuracy < 0.90 || r.ValAccuracy < 0.90 {
			t.Errorf("%s: test accuracy %.4f, validation %.4f after 400 steps, want >= 0.90", mode, r.TestAccuracy, r.ValAccuracy)
		}
	}
}

// The full runs: 10,000 global steps on 2 workers and 1 ps. At the
// TensorFlow example's Adam learning rate of 0.01 a single process reaches
// about 97.0% (its final iterate is noisy), so the 97.5% target is checked
// at 0.001; see README.
func TestMNISTFull(t *testing.T) {
	if testing.Short() {
		t.Skip("full MNIST runs take minutes; run without -short")
	}
	for _, mode := range []string{"--sync_replicas=false", "--sync_replicas"} {
		r := runMNIST(t, "mnist", "--learning_rate=0.001", mode)
		if r.TestAccuracy < 0.975 {
			t.Errorf("mnist %s: test accuracy %.4f, want >= 0.975", mode, r.TestAccuracy)
		}
	}
	// Fashion-MNIST at the same rate: 87.7% async, 88.5% sync here (at the
	// example's 0.01, async runs scatter from 81.6% to 86%).
	r := runMNIST(t, "fashion-mnist", "--learning_rate=0.001")
	if r.TestAccuracy < 0.85 {
		t.Errorf("fashion-mnist: test accuracy %.4f, want >= 0.85", r.TestAccuracy)
	}
}

// findChild returns the pid of local's child running job/index.
func findChild(t *testing.T, localPid int, job string, index int) int {
	t.Helper()
	for _, pid := range childrenOf(localPid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "--job_name="+job) && slices.Contains(args, fmt.Sprintf("--task_index=%d", index)) {
			return pid
		}
	}
	t.Fatalf("no %s %d among the children of %d", job, index, localPid)
	return 0
}

// waitCount waits until s appears n times in the output.
func (p *proc) waitCount(t *testing.T, s string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for strings.Count(p.output(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s printed %q %d times, want %d", p.name, s, strings.Count(p.output(), s), n)
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before printing %q %d times", p.name, s, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Fault tests: kill -9 a ps, a worker or the chief in the middle of a job
// run by paramserv local (which restarts it). The job finishes with the
// accuracy it would have had, the log says what was lost, and no process is
// left behind.
func TestKillAndRecover(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("fault tests take a while; run without -short (CI runs them)")
	}
	for _, tc := range []struct {
		name  string
		job   string
		index int
		sync  bool
		want  string // a log line that shows the recovery
	}{
		{"ps-async", "ps", 1, false, "steps lost"},
		{"ps-sync", "ps", 0, true, "steps lost"},
		{"worker-async", "worker", 1, false, "worker1 exited unexpectedly"},
		{"worker-sync", "worker", 1, true, "worker1 exited unexpectedly"},
		{"chief-async", "worker", 0, false, "training goes on from global step"},
		{"chief-sync", "worker", 0, true, "training goes on from global step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res := filepath.Join(dir, "result.json")
			args := []string{"local", "--ps=2", "--workers=2", "--model=linreg", "--train_steps=20000", "--steps_to_validate=1000",
				"--checkpoint_dir=" + filepath.Join(dir, "ckpt"), "--save_steps=500", "--sync_timeout=1m", "--result_file=" + res}
			if tc.sync {
				args = append(args, "--sync_replicas")
			}
			p := start(t, "local", nil, args...)
			p.waitCount(t, "saved checkpoint of step", 3, time.Minute)
			victim := findChild(t, p.cmd.Process.Pid, tc.job, tc.index)
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			children := childrenOf(p.cmd.Process.Pid)
			if code := p.wait(t, 3*time.Minute); code != 0 {
				t.Fatalf("exit %d", code)
			}
			out := p.output()
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q", tc.want)
			}
			r := readResult(t, res)
			checkLinreg(t, r)
			if r.GlobalStep < 20000 {
				t.Errorf("global step %d, want >= 20000", r.GlobalStep)
			}
			for _, pid := range append(children, victim) {
				if alive(pid) {
					t.Errorf("process %d outlived the job", pid)
				}
			}
		})
	}
}

// A damaged newest checkpoint: ckpt ls reports it, and a cluster started on
// the directory restores the one before it, saying so.
func TestDamagedCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=1", "--train_steps=1000", "--checkpoint_dir="+dir, "--save_steps=400")
	if code := p.wait(t, time.Minute); code != 0 {
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
	ls := start(t, "ckpt ls", nil, "ckpt", "ls", dir)
	if code := ls.wait(t, time.Minute); code != 0 {
		t.Fatalf("ckpt ls exit %d", code)
	}
	if out := ls.output(); !strings.Contains(out, "ckpt-1000") || !strings.Contains(out, "damaged") || !strings.Contains(out, "checksum") || !strings.Contains(out, "ckpt-800") {
		t.Fatalf("ckpt ls does not report the damage:\n%s", out)
	}
	inspect := start(t, "ckpt inspect", nil, "ckpt", "inspect", dir)
	if code := inspect.wait(t, time.Minute); code != 0 || !strings.Contains(inspect.output(), "weight") {
		t.Fatalf("ckpt inspect exit %d:\n%s", code, inspect.output())
	}
	res := filepath.Join(t.TempDir(), "r.json")
	p = start(t, "local", nil, "local", "--ps=2", "--workers=1", "--train_steps=1500", "--checkpoint_dir="+dir, "--save_steps=400", "--result_file="+res)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := p.output()
	if !strings.Contains(out, "ckpt-1000 damaged") || !strings.Contains(out, "restored checkpoint of step 800") {
		t.Fatalf("the restart does not say it skipped the damaged checkpoint:\n%s", out)
	}
	checkLinreg(t, readResult(t, res))
}

// `paramserv bench` end to end: ps and baseline server as processes of
// their own, every case verified, the JSON fields the issue lists, and
// the CPU comparison, which needs both as processes.
func TestBenchProcesses(t *testing.T) {
	p := start(t, "bench", nil, "bench", "--json", "--cases=tiny,dense,sparse", "--dense_bytes=256K",
		"--sparse_keys=1k", "--dim=2", "--reps=5", "--op=push,pushpull")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("bench exited %d", code)
	}
	// The CPU figures need the kernel's per-thread schedstat.
	_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d/schedstat", os.Getpid()))
	haveSchedstat := err == nil
	var lines int
	for _, line := range strings.Split(p.output(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		lines++
		var r struct {
			Case        string  `json:"case"`
			Op          string  `json:"op"`
			Verified    bool    `json:"verified"`
			Median      float64 `json:"median_ms"`
			Ratio       float64 `json:"ratio_to_baseline"`
			PSCPU       float64 `json:"ps_cpu_ms_per_op"`
			BaselineCPU float64 `json:"baseline_cpu_ms_per_op"`
			CPURatio    float64 `json:"cpu_ratio_to_baseline"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if !r.Verified || r.Median <= 0 || r.Ratio <= 0 {
			t.Errorf("%s %s: %s", r.Case, r.Op, line)
		}
		if haveSchedstat && (r.PSCPU <= 0 || r.BaselineCPU <= 0 || r.CPURatio <= 0) {
			t.Errorf("%s %s: no CPU comparison: %s", r.Case, r.Op, line)
		}
	}
	if lines != 6 {
		t.Errorf("%d JSON lines, want 3 cases x 2 operations:\n%s", lines, p.output())
	}
}
