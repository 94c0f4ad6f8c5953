package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// failingListener fails its first n accepts with err, as a process out of
// file descriptors does, then accepts as its listener does.
type failingListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.n > 0 {
		l.n--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", l.err)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// Accept failing for want of file descriptors (EMFILE, ENFILE) is a
// passing condition: the ps logs it once per burst and goes on accepting,
// where it used to stop serving (issue 12, failure 12).
func TestAcceptOutOfFilesKeepsServing(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			tl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis := &failingListener{Listener: tl, n: 5, err: errno}
			var log logLines
			s := server.New(server.Config{NumWorkers: 1, Logf: log.logf})
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- server.ServeListener(ctx, lis, s) }()
			defer func() {
				cancel()
				select {
				case err := <-served:
					if err != nil {
						t.Errorf("ServeListener: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Error("ServeListener did not return within 30s of its context's end")
				}
			}()

			callCtx, stop := context.WithTimeout(context.Background(), time.Minute)
			defer stop()
			vars := []model.Variable{{Name: "w", Shape: []int{2}}}
			c, err := client.New([]string{tl.Addr().String()}, vars, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.WaitReady(callCtx, false); err != nil {
				t.Fatalf("after %d failed accepts: %v", 5, err)
			}
			if _, err := c.Init(callCtx, model.Params{"w": {1, 2}}, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Push(callCtx, 0, model.Params{"w": {1, 1}}); err != nil {
				t.Fatal(err)
			}
			got := model.NewParams(vars)
			if _, err := c.Pull(callCtx, 1, got); err != nil {
				t.Fatal(err)
			}
			if got["w"][0] != 0 || got["w"][1] != 1 {
				t.Fatalf("w = %v, want [0 1]", got["w"])
			}
			if n := log.count(errno.Error()); n != 1 {
				t.Fatalf("%q logged %d times for one burst of 5 failed accepts, want once:\n%s", errno.Error(), n, strings.Join(log.lines, "\n"))
			}
		})
	}
}

// outOfFilesListener fails accepts with EMFILE while out is set.
type outOfFilesListener struct {
	net.Listener
	mu  sync.Mutex
	out int
}

func (l *outOfFilesListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.out > 0 {
		l.out--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// closedWithin reports whether the ps closes c (a read ends) before d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// serveFor serves a fresh ps on lis (wrapped by wrap) for the test.
func serveFor(t *testing.T, cfg server.Config, wrap func(net.Listener) net.Listener) net.Addr {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.ServeListener(ctx, wrap(tl), s) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Error("ServeListener did not return within 30s of its context's end")
		}
	})
	return tl.Addr()
}

// Issue 28, item 6: idle connections that sent a preface's first bytes
// ("PSDP", "PRI ") were never shed (only those with fewer than 4 bytes
// were), so 2,000 of them locked every new client out. Out of
// descriptors, the ps now sheds those that never completed a handshake,
// oldest first, and not a worker's connection that did.
func TestShedsHalfHandshakes(t *testing.T) {
	var lis *outOfFilesListener
	addr := serveFor(t, server.Config{NumWorkers: 1, Logf: t.Logf, HandshakeTimeout: time.Hour}, func(l net.Listener) net.Listener {
		lis = &outOfFilesListener{Listener: l}
		return lis
	})
	callCtx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	c, err := client.New([]string{addr.String()}, vars, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Init(callCtx, model.Params{"w": {1, 2}}, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	var idle []net.Conn
	for _, pre := range []string{"PSDP", "PRI ", "PSDP", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"} {
		conn, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(pre)); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	// A worker connection made after them: younger, and handshaken.
	if _, _, err := c.Push(callCtx, 0, model.Params{"w": {1, 1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the idle ones' bytes are read (no wall-clock bound on the test: it only lets them land)
	lis.mu.Lock()
	lis.out = len(idle)
	lis.mu.Unlock()
	// The accept loop is woken by a connection; out of files, it sheds.
	waker, err := net.Dial("tcp", addr.String())
	if err == nil {
		defer waker.Close()
	}
	for i, conn := range idle {
		if !closedWithin(conn, 30*time.Second) {
			t.Errorf("idle connection %d (a preface begun, never completed) not shed", i)
		}
	}
	got := model.NewParams(vars)
	if _, err := c.Pull(callCtx, 1, got); err != nil {
		t.Fatalf("the worker's connection after the shedding: %v", err)
	}
}

// A connection that sends its preface a byte at a time (slowloris), or
// sends "PSDP" and stops, is cut at the handshake deadline.
func TestHandshakeDeadline(t *testing.T) {
	addr := serveFor(t, server.Config{NumWorkers: 1, HandshakeTimeout: 300 * time.Millisecond}, func(l net.Listener) net.Listener { return l })
	slow, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; i < 2000; i++ { // 100 s at most; the ps cuts it long before
			if _, err := slow.Write([]byte{"PSDP\x00\x00\x00\x00"[i%8]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	idle, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := idle.Write([]byte("PSDP")); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(idle, 30*time.Second) {
		t.Error(`a connection that sent "PSDP" and nothing more was not cut`)
	}
	if !closedWithin(slow, 30*time.Second) {
		t.Error("a slowloris preface was not cut")
	}
	slow.Close()
	<-stopped
}
