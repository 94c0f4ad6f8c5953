package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/procgroup"
	"github.com/paramserv/paramserv/internal/server"
)

// Cluster is the ps of one case, serving. Its methods may be called from
// any goroutine.
type Cluster interface {
	// Addrs are the ps addresses, ps 0 first.
	Addrs() []string
	// Dead is closed when a ps stops before Close was called.
	Dead() <-chan struct{}
	// Mem reports the memory of ps i; ok is false where it cannot be
	// measured (a ps inside this process).
	Mem(i int) (m ProcMem, ok bool)
	// CPU reports the CPU time ps i has used so far; ok is false where it
	// cannot be measured (a ps inside this process).
	CPU(i int) (d time.Duration, ok bool)
	// Close ends the ps. With wait (every worker has called Done) it
	// gives them a few seconds to exit by themselves and reports those
	// that did not or that failed; otherwise it stops them at once.
	Close(wait bool) error
}

// StartFunc starts numPS ps for numWorkers workers.
type StartFunc func(ctx context.Context, numPS, numWorkers int) (Cluster, error)

// ProcMem is a process's memory from /proc/<pid>/status.
type ProcMem struct {
	RSS, PeakRSS int64 // VmRSS and VmHWM, bytes
}

// ReadProcMem reads VmRSS and VmHWM of process pid (Linux).
func ReadProcMem(pid int) (ProcMem, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ProcMem{}, err
	}
	defer f.Close()
	var m ProcMem
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(rest) // "1234 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return ProcMem{}, fmt.Errorf("bench: /proc/%d/status: cannot read %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return ProcMem{}, fmt.Errorf("bench: /proc/%d/status: cannot read %q", pid, sc.Text())
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.PeakRSS = kb << 10
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return ProcMem{}, err
	}
	if found != 2 {
		return ProcMem{}, fmt.Errorf("bench: /proc/%d/status has no VmRSS or VmHWM", pid)
	}
	return m, nil
}

// ProcessStarter starts each ps as a child process: exe train
// --job_name=ps --task_index=i --ps_hosts=... --worker_hosts=..., on free
// loopback ports (the worker addresses are free ports too, never listened
// on: workers only dial). Each child gets SIGKILL if this process dies. The
// last lines of each child's output are kept for error messages; with
// logTo set, every line is also written there, prefixed "[ps0] ". psArgs
// are added to every ps's command line (--tls_dir=...).
func ProcessStarter(exe string, logTo io.Writer, psArgs ...string) StartFunc {
	return func(ctx context.Context, numPS, numWorkers int) (Cluster, error) {
		ports, err := local.FreePorts(numPS + numWorkers)
		if err != nil {
			return nil, err
		}
		hosts := make([]string, len(ports))
		for i, p := range ports {
			hosts[i] = fmt.Sprintf("127.0.0.1:%d", p)
		}
		pc := &procCluster{addrs: hosts[:numPS], dead: make(chan struct{}), closing: make(chan struct{})}
		for i := range numPS {
			args := []string{"train", "--job_name=ps", "--task_index=" + strconv.Itoa(i),
				"--ps_hosts=" + strings.Join(hosts[:numPS], ","), "--worker_hosts=" + strings.Join(hosts[numPS:], ",")}
			args = append(args, psArgs...)
			if err := pc.start(exe, args, fmt.Sprintf("ps%d", i), logTo); err != nil {
				pc.Close(false)
				return nil, err
			}
		}
		return pc, nil
	}
}

type procCluster struct {
	addrs    []string
	children []*psChild
	dead     chan struct{}
	deadOnce sync.Once
	closing  chan struct{} // closed by Close, before the children are stopped
	logMu    sync.Mutex    // serialises lines written to logTo
}

type psChild struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its output is drained
	err  error         // exit error, set before done closes

	mu   sync.Mutex // guards tail
	tail []string   // the last lines of output
}

const tailLines = 20

func (pc *procCluster) start(exe string, args []string, name string, logTo io.Writer) error {
	c := &psChild{name: name, done: make(chan struct{})}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Env = local.ChildEnv()
	c.cmd.SysProcAttr = procgroup.Attr()
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	c.cmd.Stderr = c.cmd.Stdout
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("bench: starting %s (%s): %w", name, exe, err)
	}
	pc.children = append(pc.children, c)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.tail = append(c.tail, line)
			if len(c.tail) > tailLines {
				c.tail = c.tail[1:]
			}
			c.mu.Unlock()
			if logTo != nil {
				pc.logMu.Lock()
				fmt.Fprintf(logTo, "[%s] %s\n", name, line)
				pc.logMu.Unlock()
			}
		}
		c.err = c.cmd.Wait()
		close(c.done)
		select {
		case <-pc.closing:
		default:
			pc.deadOnce.Do(func() { close(pc.dead) })
		}
	}()
	return nil
}

func (pc *procCluster) Addrs() []string       { return pc.addrs }
func (pc *procCluster) Dead() <-chan struct{} { return pc.dead }

func (pc *procCluster) Mem(i int) (ProcMem, bool) {
	m, err := ReadProcMem(pc.children[i].cmd.Process.Pid)
	return m, err == nil
}

// PID is the process id of ps i.
func (pc *procCluster) PID(i int) int { return pc.children[i].cmd.Process.Pid }

func (pc *procCluster) CPU(i int) (time.Duration, bool) {
	d, err := ReadProcCPU(pc.PID(i))
	return d, err == nil
}

// ReadProcCPU returns the CPU time process pid's threads have used, user
// and system, from each thread's /proc/<pid>/task/<tid>/schedstat (in
// nanoseconds, unlike /proc/<pid>/stat's 10 ms ticks). Threads that have
// exited are not counted; a Go process keeps its threads.
func ReadProcCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) != 3 {
			return 0, fmt.Errorf("bench: %s/%s/schedstat: want 3 fields, got %q", dir, t.Name(), b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: %s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

func (pc *procCluster) Close(wait bool) error {
	select {
	case <-pc.closing:
	default:
		close(pc.closing)
	}
	if wait {
		deadline := time.After(10 * time.Second)
	waiting:
		for _, c := range pc.children {
			select {
			case <-c.done:
			case <-deadline:
				break waiting
			}
		}
	}
	var errs []error
	for _, c := range pc.children {
		select {
		case <-c.done:
			if wait && c.err != nil {
				errs = append(errs, c.failure(local.DescribeExit(c.err)))
			}
			continue
		default:
		}
		if wait {
			errs = append(errs, c.failure("did not exit within 10s of every worker calling Done; killed"))
		}
		_ = procgroup.Signal(c.cmd.Process, syscall.SIGTERM)
	}
	grace := time.After(3 * time.Second)
	for _, c := range pc.children {
		select {
		case <-c.done:
		case <-grace:
			_ = procgroup.Signal(c.cmd.Process, syscall.SIGKILL)
			<-c.done
		}
	}
	return errors.Join(errs...)
}

// failure is an error naming the child, what happened, and its last lines.
func (c *psChild) failure(what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) == 0 {
		return fmt.Errorf("bench: %s %s (no output)", c.name, what)
	}
	return fmt.Errorf("bench: %s %s; its last lines:\n  %s", c.name, what, strings.Join(c.tail, "\n  "))
}

// exitReport describes why children that died early stopped, for an error
// message; it waits briefly for their output to drain.
func (pc *procCluster) exitReport() error {
	var errs []error
	for _, c := range pc.children {
		select {
		case <-c.done:
			errs = append(errs, c.failure("exited early: "+local.DescribeExit(c.err)))
		case <-time.After(time.Second):
		}
	}
	return errors.Join(errs...)
}

// InProcessStarter starts each ps inside this process, on a loopback
// listener (server.ServeListener), for tests and Go benchmarks. Memory
// cannot be measured per ps.
func InProcessStarter() StartFunc {
	return func(ctx context.Context, numPS, numWorkers int) (Cluster, error) {
		ctx, cancel := context.WithCancel(ctx)
		ic := &inProcCluster{cancel: cancel, dead: make(chan struct{}), closing: make(chan struct{})}
		var lis []net.Listener
		for range numPS {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				cancel()
				for _, l := range lis {
					l.Close()
				}
				return nil, fmt.Errorf("bench: listening for an in-process ps: %w", err)
			}
			lis = append(lis, l)
			ic.addrs = append(ic.addrs, l.Addr().String())
		}
		for i, l := range lis {
			s := server.New(server.Config{Task: i, NumPS: numPS, NumWorkers: numWorkers})
			ic.wg.Add(1)
			go func() {
				defer ic.wg.Done()
				err := server.ServeListener(ctx, l, s)
				select {
				case <-ic.closing:
				default:
					ic.mu.Lock()
					ic.err = errors.Join(ic.err, fmt.Errorf("bench: in-process ps %d stopped early: %v", i, err))
					ic.mu.Unlock()
					ic.deadOnce.Do(func() { close(ic.dead) })
				}
			}()
		}
		return ic, nil
	}
}

type inProcCluster struct {
	addrs     []string
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	dead      chan struct{}
	deadOnce  sync.Once
	closing   chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex // guards err
	err       error
}

func (ic *inProcCluster) Addrs() []string               { return ic.addrs }
func (ic *inProcCluster) Dead() <-chan struct{}         { return ic.dead }
func (ic *inProcCluster) Mem(int) (ProcMem, bool)       { return ProcMem{}, false }
func (ic *inProcCluster) CPU(int) (time.Duration, bool) { return 0, false }
func (ic *inProcCluster) exitReport() error             { ic.mu.Lock(); defer ic.mu.Unlock(); return ic.err }
func (ic *inProcCluster) Close(wait bool) error {
	ic.closeOnce.Do(func() { close(ic.closing) })
	done := make(chan struct{})
	go func() { ic.wg.Wait(); close(done) }()
	var err error
	if wait {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			err = errors.New("bench: an in-process ps did not stop within 10s of every worker calling Done")
		}
	}
	ic.cancel()
	<-done
	return err
}
