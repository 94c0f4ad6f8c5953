package server_test

import (
	"context"
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
