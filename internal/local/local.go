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
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config describes the cluster to start.
type Config struct {
	NumPS, NumWorkers int
	// Exe is the paramserv binary; Subcommand its subcommand ("train").
	Exe        string
	Subcommand string
	// Args go to every task; ChiefArgs only to worker 0.
	Args, ChiefArgs []string
	// Out receives every child's prefixed output lines.
	Out io.Writer
	// Logf receives the launcher's own lines.
	Logf func(format string, args ...any)
	// Grace is how long a child has to exit after SIGTERM before SIGKILL (5s if 0).
	Grace time.Duration
	// PSExitTimeout is how long the ps may take to exit once every worker
	// has (30s if 0).
	PSExitTimeout time.Duration
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is drained
	err  error         // the exit error, set before done closes
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1. They are held
// open until all are chosen, so they are distinct; another process could
// still take one before the child binds it (the child then fails with a
// clear "port in use" error).
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("local: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
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
	psHosts := strings.Join(hosts[:cfg.NumPS], ",")
	workerHosts := strings.Join(hosts[cfg.NumPS:], ",")
	cfg.Logf("local cluster: ps %s; workers %s", psHosts, workerHosts)

	var outMu sync.Mutex
	var children []*child
	start := func(job string, index int) error {
		args := []string{cfg.Subcommand, "--job_name=" + job, fmt.Sprintf("--task_index=%d", index),
			"--ps_hosts=" + psHosts, "--worker_hosts=" + workerHosts}
		args = append(args, cfg.Args...)
		if job == "worker" && index == 0 {
			args = append(args, cfg.ChiefArgs...)
		}
		c := &child{name: fmt.Sprintf("%s%d", job, index), done: make(chan struct{})}
		c.cmd = exec.Command(cfg.Exe, args...)
		c.cmd.Env = withoutTFConfig(os.Environ())
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		c.cmd.Stderr = c.cmd.Stdout // one stream, so lines keep their order
		if err := c.cmd.Start(); err != nil {
			return fmt.Errorf("local: starting %s: %w", c.name, err)
		}
		children = append(children, c)
		go func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			prefix := "[" + c.name + "] "
			for sc.Scan() {
				outMu.Lock()
				fmt.Fprintf(cfg.Out, "%s%s\n", prefix, sc.Bytes())
				outMu.Unlock()
			}
			c.err = c.cmd.Wait()
			close(c.done)
		}()
		return nil
	}
	for i := 0; i < cfg.NumPS; i++ {
		if err := start("ps", i); err != nil {
			stopAll(children, cfg.Grace)
			return err
		}
	}
	for i := 0; i < cfg.NumWorkers; i++ {
		if err := start("worker", i); err != nil {
			stopAll(children, cfg.Grace)
			return err
		}
	}
	return supervise(ctx, cfg, children)
}

// withoutTFConfig drops TF_CONFIG from env: the children get their roles
// from flags, and a TF_CONFIG meant for something else must not mix in.
func withoutTFConfig(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "TF_CONFIG=") {
			out = append(out, e)
		}
	}
	return out
}

// supervise waits for the children: success when all exit 0; otherwise it
// stops the rest and reports.
func supervise(ctx context.Context, cfg Config, children []*child) error {
	exited := make(chan *child, len(children))
	for _, c := range children {
		go func() { <-c.done; exited <- c }()
	}
	workersLeft := cfg.NumWorkers
	var psDeadline <-chan time.Time
	for remaining := len(children); remaining > 0; {
		select {
		case c := <-exited:
			remaining--
			if c.err != nil {
				cfg.Logf("%s failed: %v; stopping the other processes", c.name, describe(c.err))
				stopAll(children, cfg.Grace)
				return fmt.Errorf("local: %s failed: %v", c.name, describe(c.err))
			}
			cfg.Logf("%s exited 0", c.name)
			if strings.HasPrefix(c.name, "worker") {
				workersLeft--
				if workersLeft == 0 {
					psDeadline = time.After(cfg.PSExitTimeout)
				}
			}
		case <-psDeadline:
			var running []string
			for _, c := range children {
				select {
				case <-c.done:
				default:
					running = append(running, c.name)
				}
			}
			stopAll(children, cfg.Grace)
			return fmt.Errorf("local: every worker finished but %s did not exit within %s", strings.Join(running, ", "), cfg.PSExitTimeout)
		case <-ctx.Done():
			cfg.Logf("interrupted (%v); stopping every process", context.Cause(ctx))
			stopAll(children, cfg.Grace)
			return fmt.Errorf("local: interrupted: %w", context.Cause(ctx))
		}
	}
	return nil
}

func describe(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
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
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	}
}
