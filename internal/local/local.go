// Package local runs a whole cluster on this machine: every ps and worker
// as a separate OS process of the same binary, on free loopback ports. Each
// child's output lines are prefixed with its role ("[ps0] ", "[worker1] ").
// Run returns nil only when every child exited 0; on the first failure, or
// when ctx ends (Ctrl-C), it stops every child and reports which failed and
// why. No child outlives it: children also get SIGKILL from the kernel if
// this process dies (Linux's parent-death signal).
package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paramserv/paramserv/internal/procgroup"
)

// Config describes the cluster to start.
type Config struct {
	NumPS, NumWorkers int
	// Exe is the paramserv binary; Subcommand its subcommand ("train").
	Exe        string
	Subcommand string
	// Args go to every task; ChiefArgs only to worker 0.
	Args, ChiefArgs []string
	// WorkerCmd, if set, is the program each worker runs instead of Exe
	// (the user's own training program, `paramserv local -- CMD ARGS`):
	// started once per worker with TF_CONFIG naming the cluster and that
	// worker's task, as Kubernetes' TFJob operator sets it, and neither
	// Args nor ChiefArgs. The ps are still Exe. Once every worker has
	// exited 0, ps that do not exit by themselves (a program that never
	// told them it was done) are stopped, and that is not a failure.
	WorkerCmd []string
	// WorkerEnv is added to the environment of each WorkerCmd worker;
	// WorkerEnvs[i], if there is one, after it to worker i's (its metrics
	// address).
	WorkerEnv  []string
	WorkerEnvs [][]string
	// Out receives the prefixed lines of every child's stdout; Err those of
	// its stderr (Out if nil).
	Out, Err io.Writer
	// Interrupted, if set, is called when ctx ends (Ctrl-C), after the
	// workers have stopped and before the ps are stopped, with the ps's
	// addresses: the moment to ask the ps where training stands.
	Interrupted func(ps []string)
	// Logf receives the launcher's own lines.
	Logf func(format string, args ...any)
	// Grace is how long a child has to exit after SIGTERM before SIGKILL (5s if 0).
	Grace time.Duration
	// PSExitTimeout is how long the ps may take to exit once every worker
	// has (30s if 0).
	PSExitTimeout time.Duration
	// RestartPS restarts a ps that exits unexpectedly while workers run;
	// RestartWorkers restarts a worker killed by a signal (a worker that
	// exits with an error is not restarted: the error would come again).
	// Each process is restarted at most MaxRestarts times (3 if 0).
	RestartPS, RestartWorkers bool
	MaxRestarts               int
	// Replicas > 1 replicates each ps's shard on that many ps
	// (--replicas): Run chooses the --replica_hosts of every task, and a
	// ps that dies is not a failure of the job (restarted under RestartPS,
	// it rejoins and copies its shards back), since
	// its shards fail over to their copies (one that exits with status 2,
	// input to fix, ends the job as without replicas).
	Replicas int

	psAddrs []string // chosen by Run
}

type child struct {
	name     string
	job      string
	exe      string
	args     []string
	env      []string // added to ChildEnv
	restarts int
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited and its output is drained
	err      error         // the exit error, set before done closes
}

// Run starts the cluster and waits for it. See the package doc.
func Run(ctx context.Context, cfg Config) error {
	if cfg.NumPS < 1 || cfg.NumWorkers < 1 {
		return fmt.Errorf("local: need at least one ps and one worker, got --ps=%d --workers=%d", cfg.NumPS, cfg.NumWorkers)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.PSExitTimeout <= 0 {
		cfg.PSExitTimeout = 30 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ports, err := FreePorts(cfg.NumPS + cfg.NumWorkers)
	if err != nil {
		return err
	}
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	cfg.psAddrs = hosts[:cfg.NumPS]
	psHosts := strings.Join(hosts[:cfg.NumPS], ",")
	workerHosts := strings.Join(hosts[cfg.NumPS:], ",")
	cfg.Logf("local cluster: ps %s; workers %s", psHosts, workerHosts)
	replicaArgs, err := replicaHosts(cfg)
	if err != nil {
		return err
	}

	var outMu sync.Mutex
	var children []*child
	for _, role := range []struct {
		job string
		n   int
	}{{"ps", cfg.NumPS}, {"worker", cfg.NumWorkers}} {
		for i := range role.n {
			c := &child{name: fmt.Sprintf("%s%d", role.job, i), job: role.job, exe: cfg.Exe}
			if role.job == "worker" && len(cfg.WorkerCmd) > 0 {
				c.exe, c.args = cfg.WorkerCmd[0], cfg.WorkerCmd[1:]
				c.env = append([]string{"TF_CONFIG=" + TFConfig(hosts[:cfg.NumPS], hosts[cfg.NumPS:], role.job, i)}, cfg.WorkerEnv...)
				if i < len(cfg.WorkerEnvs) {
					c.env = append(c.env, cfg.WorkerEnvs[i]...)
				}
			} else {
				c.args = []string{cfg.Subcommand, "--job_name=" + role.job, fmt.Sprintf("--task_index=%d", i),
					"--ps_hosts=" + psHosts, "--worker_hosts=" + workerHosts}
				c.args = append(c.args, cfg.Args...)
				c.args = append(c.args, replicaArgs...)
				if role.job == "worker" && i == 0 {
					c.args = append(c.args, cfg.ChiefArgs...)
				}
			}
			if err := c.start(cfg, &outMu); err != nil {
				stopAll(children, cfg.Grace)
				return err
			}
			children = append(children, c)
		}
	}
	return supervise(ctx, cfg, children, &outMu)
}

// start starts (or restarts) the child's process and a goroutine that
// copies its output, prefixed, and records its exit.
func (c *child) start(cfg Config, outMu *sync.Mutex) error {
	c.done = make(chan struct{})
	c.err = nil
	c.cmd = exec.Command(c.exe, c.args...)
	c.cmd.Env = append(ChildEnv(), c.env...)
	c.cmd.SysProcAttr = procgroup.Attr()
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errOut := cfg.Err
	var stderr io.Reader
	if errOut == nil {
		c.cmd.Stderr = c.cmd.Stdout // one stream, so lines keep their order
	} else if stderr, err = c.cmd.StderrPipe(); err != nil {
		return err
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("local: starting %s: %w", c.name, err)
	}
	done := c.done
	prefix := "[" + c.name + "] "
	copyLines := func(r io.Reader, w io.Writer) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			outMu.Lock()
			fmt.Fprintf(w, "%s%s\n", prefix, sc.Bytes())
			outMu.Unlock()
		}
	}
	var copied sync.WaitGroup
	if stderr != nil {
		copied.Add(1)
		go func() { defer copied.Done(); copyLines(stderr, errOut) }()
	}
	go func() {
		copyLines(out, cfg.Out)
		copied.Wait()
		c.err = c.cmd.Wait()
		close(done)
	}()
	return nil
}

// TFConfig is the TF_CONFIG of task index of job in a cluster of the ps
// and worker addresses, as Kubeflow's TFJob operator writes it.
func TFConfig(ps, workers []string, job string, index int) string {
	b, _ := json.Marshal(map[string]any{
		"cluster": map[string][]string{"ps": ps, "worker": workers},
		"task":    map[string]any{"type": job, "index": index},
	})
	return string(b)
}

// ChildEnv is the environment for a child task: this process's, without
// TF_CONFIG, since children get their roles from flags and a TF_CONFIG meant
// for something else must not mix in.
func ChildEnv() []string { return withoutTFConfig(os.Environ()) }

func withoutTFConfig(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "TF_CONFIG=") {
			out = append(out, e)
		}
	}
	return out
}

// supervise waits for the children: success when all exit 0; a crashed
// process is restarted where the config allows; otherwise it stops the rest
// and reports.
func supervise(ctx context.Context, cfg Config, children []*child, outMu *sync.Mutex) error {
	if cfg.MaxRestarts <= 0 {
		cfg.MaxRestarts = 3
	}
	exited := make(chan *child, len(children))
	watch := func(c *child) {
		done := c.done
		go func() { <-done; exited <- c }()
	}
	for _, c := range children {
		watch(c)
	}
	workersLeft := cfg.NumWorkers
	var psDeadline <-chan time.Time
	for remaining := len(children); remaining > 0; {
		select {
		case c := <-exited:
			if c.err != nil && c.job == "ps" && cfg.Replicas > 1 && !exitedTwo(c.err) {
				// Its shards fail over to their copies; started again, it
				// rejoins as a new copy of them (re-replication).
				if restartable(cfg, c, workersLeft) {
					c.restarts++
					cfg.Logf("%s exited (%s); its shards fail over to their copies (--replicas=%d); restarting it to copy them back (restart %d of %d)", c.name, DescribeExit(c.err), cfg.Replicas, c.restarts, cfg.MaxRestarts)
					if err := c.start(cfg, outMu); err == nil {
						watch(c)
						continue
					} else {
						cfg.Logf("%v", err)
					}
				} else {
					cfg.Logf("%s exited (%s); not restarted: its shards fail over to their copies (--replicas=%d)", c.name, DescribeExit(c.err), cfg.Replicas)
				}
				remaining--
				continue
			}
			if c.err != nil {
				if restartable(cfg, c, workersLeft) {
					c.restarts++
					cfg.Logf("%s exited unexpectedly (%s); restarting it (restart %d of %d)", c.name, DescribeExit(c.err), c.restarts, cfg.MaxRestarts)
					if err := c.start(cfg, outMu); err == nil {
						watch(c)
						continue
					} else {
						cfg.Logf("%v", err)
					}
				}
				cfg.Logf("%s failed: %s; stopping the other processes", c.name, DescribeExit(c.err))
				stopAll(children, cfg.Grace)
				return failure(c, children)
			}
			remaining--
			cfg.Logf("%s exited 0", c.name)
			if c.job == "worker" {
				workersLeft--
				if workersLeft == 0 {
					psDeadline = time.After(cfg.PSExitTimeout)
					stopRestartedPS(cfg, children)
				}
			}
		case <-psDeadline:
			if len(cfg.WorkerCmd) > 0 {
				// The user's program may not tell the ps it is done.
				cfg.Logf("every worker exited 0; stopping the ps, which were not told the workers are done (call done() at the end of the program to end them sooner)")
				stopAll(children, cfg.Grace)
				return nil
			}
			var running []*child
			for _, c := range children {
				select {
				case <-c.done:
				default:
					running = append(running, c)
				}
			}
			stopAll(children, cfg.Grace)
			// A ps that exits 0 on the SIGTERM knew the job was over (it
			// restored the job's final checkpoint); one that did not says
			// so by its exit status (143: stopped before every worker
			// finished).
			var failed []string
			for _, c := range running {
				if c.err != nil {
					failed = append(failed, fmt.Sprintf("%s (stopped: %s)", c.name, DescribeExit(c.err)))
				}
			}
			if len(failed) == 0 {
				cfg.Logf("every worker finished; the ps still running after %s knew the job was over and exited 0 when stopped", cfg.PSExitTimeout)
				return nil
			}
			return fmt.Errorf("local: every worker finished but %s did not exit within %s", strings.Join(failed, ", "), cfg.PSExitTimeout)
		case <-ctx.Done():
			// The workers first, so that none is left waiting for a ps;
			// then the ps.
			cfg.Logf("interrupted (%v); stopping the workers, then the ps", context.Cause(ctx))
			var workers, ps []*child
			for _, c := range children {
				if c.job == "worker" {
					workers = append(workers, c)
				} else {
					ps = append(ps, c)
				}
			}
			stopAll(workers, cfg.Grace)
			if cfg.Interrupted != nil {
				cfg.Interrupted(cfg.psAddrs)
			}
			stopAll(ps, cfg.Grace)
			return fmt.Errorf("local: interrupted: %w", context.Cause(ctx))
		}
	}
	return nil
}

// stopRestartedPS sends SIGTERM, once every worker has exited 0, to each
// ps that was restarted and still runs. A restarted ps cannot have heard
// the workers that said they were done before it started, so it would
// wait for them (issue 31, item 1); stopped, it exits 0 if it knows the job
// was over (it restored the job's final checkpoint, at the goal step) and
// 143 if not, which supervise then reports as a failure.
func stopRestartedPS(cfg Config, children []*child) {
	for _, c := range children {
		if c.job != "ps" || c.restarts == 0 {
			continue
		}
		select {
		case <-c.done:
			continue
		default:
		}
		cfg.Logf("every worker finished; stopping %s, which was restarted after some of them had said they were done (it exits 0 if it knows the job is over)", c.name)
		signalGroup(c, syscall.SIGTERM)
	}
}

// Failure is Run's error when a child failed and was not restarted: the
// child that is reported, how it ended, and whether that was input to fix.
type Failure struct {
	Child string // "worker0"
	Exit  string // as DescribeExit says it
	// InputToFix is set when a child exited 2 (input the user must fix:
	// a flag, a malformed data line); the launcher then exits 2 too.
	InputToFix bool
	// Others are the other children that had failed on their own by the
	// time every process stopped ("ps1: exit status 1").
	Others []string
}

func (f *Failure) Error() string {
	msg := fmt.Sprintf("local: %s failed: %s", f.Child, f.Exit)
	if f.InputToFix {
		msg += " (input to fix)"
	}
	if len(f.Others) > 0 {
		msg += "; also failed: " + strings.Join(f.Others, ", ")
	}
	return msg
}

// failure builds the error of a job stopped because first failed: the
// child reported is one that exited 2 (input to fix), if any did before
// they all stopped, else first. Children that exited only because
// stopAll signalled them are not failures of their own.
func failure(first *child, children []*child) *Failure {
	var failed []*child
	for _, c := range children {
		if c == first || (c.err != nil && !signalDeath(c.err)) {
			failed = append(failed, c)
		}
	}
	main := first
	for _, c := range failed {
		if exitCode(c.err) == 2 {
			main = c
			break
		}
	}
	f := &Failure{Child: main.name, Exit: DescribeExit(main.err), InputToFix: exitCode(main.err) == 2}
	for _, c := range failed {
		if c != main {
			f.Others = append(f.Others, c.name+": "+DescribeExit(c.err))
		}
	}
	return f
}

// exitCode is the child's exit status, or -1 if a signal killed it.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// signalDeath says whether a child ended because of a signal: killed by
// it, or exited 128+SIGTERM (143) or 128+SIGINT (130), the status a
// paramserv task gives after a SIGTERM or SIGINT stopped it before its
// work was done.
func signalDeath(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return true
	}
	code := ee.ExitCode()
	return code == 128+int(syscall.SIGTERM) || code == 128+int(syscall.SIGINT)
}

// restartable says whether a failed child should be restarted: a ps that
// died while workers still run (not one that rejected its configuration,
// exit status 2), or a worker killed by a signal (SIGKILL, or SIGTERM or
// SIGINT from outside: exit status 143 or 130); each at most MaxRestarts
// times. Children that the launcher itself stops are never restarted.
func restartable(cfg Config, c *child, workersLeft int) bool {
	if c.restarts >= cfg.MaxRestarts || workersLeft == 0 {
		return false
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) {
		return false
	}
	switch c.job {
	case "ps":
		return cfg.RestartPS && (signalDeath(c.err) || ee.ExitCode() != 2)
	case "worker":
		return cfg.RestartWorkers && signalDeath(c.err)
	}
	return false
}

// DescribeExit says how a child process ended: "exit status 1", "killed
// by signal killed", "exit status 143 (stopped by SIGTERM)".
func DescribeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		switch code := ee.ExitCode(); code {
		case 128 + int(syscall.SIGTERM):
			return fmt.Sprintf("exit status %d (stopped by SIGTERM)", code)
		case 128 + int(syscall.SIGINT):
			return fmt.Sprintf("exit status %d (stopped by SIGINT)", code)
		default:
			return fmt.Sprintf("exit status %d", code)
		}
	}
	return err.Error()
}

// stopAll sends SIGTERM to every running child's process group, then
// SIGKILL to those still running after grace, and waits for all.
func stopAll(children []*child, grace time.Duration) {
	for _, c := range children {
		signalGroup(c, syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, c := range children {
		select {
		case <-c.done:
		case <-deadline:
			for _, c := range children {
				signalGroup(c, syscall.SIGKILL)
			}
			<-c.done
		}
	}
}

func signalGroup(c *child, sig syscall.Signal) {
	select {
	case <-c.done:
		return
	default:
	}
	if c.cmd.Process != nil {
		_ = procgroup.Signal(c.cmd.Process, sig)
	}
}

// replicaHosts chooses the replication and copy ports of every ps under
// --replicas > 1: the --replica_hosts flag every task is given.
func replicaHosts(cfg Config) ([]string, error) {
	if cfg.Replicas <= 1 {
		return nil, nil
	}
	ports, err := FreePorts(cfg.NumPS * cfg.Replicas)
	if err != nil {
		return nil, err
	}
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return []string{"--replica_hosts=" + strings.Join(hosts, ",")}, nil
}

// exitedTwo reports whether err is an exit with status 2 (input to fix).
func exitedTwo(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == 2
}
