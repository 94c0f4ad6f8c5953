//go:build linux

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// onLockedThread runs f on a goroutine locked to its thread, as a cgo
// callback's is (the Python library's calls, for which ThreadReads is).
func onLockedThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f()
	}()
	<-done
}

// threadConns fails unless every idle data connection of c is a
// threadConn: the calls went by poll(2) on the caller's thread.
func threadConns(t *testing.T, c *Client) {
	t.Helper()
	for i, p := range c.dp.ps {
		p.mu.Lock()
		for _, d := range p.idle {
			if _, ok := d.nc.(*threadConn); !ok {
				t.Errorf("ps %d: a data connection is a %T, want a *threadConn", i, d.nc)
			}
		}
		if len(p.idle) == 0 {
			t.Errorf("ps %d: no idle data connection", i)
		}
		p.mu.Unlock()
	}
}

// With ThreadReads, calls from a locked thread give what gRPC gives for
// the same random pushes and pulls (TestDataPathAgreesWithGRPC), with one
// ps and with two (whose answers it reads in turn on the thread).
func TestThreadReadsAgreeWithGRPC(t *testing.T) {
	vars := []model.Variable{{Name: "a", Shape: []int{30, 4}}, {Name: "b", Shape: []int{7}}}
	tables := []model.Table{{Name: "emb", Dim: 3, MinCount: 2, EvictAfterSteps: 6}, {Name: "lr", Dim: 1}}
	for _, numPS := range []int{1, 2} {
		for _, sync := range []bool{false, true} {
			t.Run(fmt.Sprintf("ps=%d/sync=%v", numPS, sync), func(t *testing.T) {
				tw := newTwinWith(t, numPS, vars, tables, InitOptions{
					Optimizer: optim.Config{Name: "adam", LearningRate: 0.1}, Sync: sync, ReplicasToAggregate: 1, NumWorkers: 1,
				}, Options{ThreadReads: true})
				onLockedThread(func() { runAgreement(t, tw, 40, uint64(numPS)+11) })
				threadConns(t, tw.fast)
			})
		}
	}
}

// A dense push+pull of 16 MiB over two ps fills the sockets' buffers:
// writes and reads wait in poll(2) for room and for bytes.
func TestThreadReadsLargeCall(t *testing.T) {
	cl := startCluster(t, 2, 1)
	n := 4 << 20
	vars := []model.Variable{{Name: "big", Shape: []int{n}}}
	c, err := New(cl.addrs, vars, Options{SplitBytes: 1 << 20, ThreadReads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	grads, params := model.Params{"big": make([]float32, n)}, model.Params{"big": make([]float32, n)}
	for i := range grads["big"] {
		grads["big"][i] = float32(i % 1000)
	}
	onLockedThread(func() {
		for range 2 {
			if call := c.Do(ctx, &Request{Push: true, Grads: grads, Pull: true, Params: params}); call.Err != nil {
				t.Fatal(call.Err)
			}
		}
	})
	for i, v := range params["big"] {
		if want := -2 * float32(i%1000); v != want {
			t.Fatalf("big[%d] = %v after two pushes, want %v", i, v, want)
		}
	}
	threadConns(t, c)
}

// A call waiting for a sync step that never comes ends with its context,
// by deadline and by cancellation, and the client goes on working.
func TestThreadReadsCancelWhileWaiting(t *testing.T) {
	cl := startCluster(t, 2, 2)
	vars := []model.Variable{{Name: "w", Shape: []int{3}}, {Name: "v", Shape: []int{2}}}
	c, err := New(cl.addrs, vars, Options{ThreadReads: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, Sync: true, ReplicasToAggregate: 2, NumWorkers: 2}); err != nil {
		t.Fatal(err)
	}
	params := model.NewParams(vars)
	onLockedThread(func() {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := c.Pull(wctx, 1, params); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("pull of a step that never comes: %v, want DeadlineExceeded", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		if _, err := c.Pull(cctx, 1, params); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled pull of a step that never comes: %v, want Canceled", err)
		}
		if _, err := c.Pull(ctx, 0, params); err != nil {
			t.Errorf("next pull: %v", err)
		}
	})
	threadConns(t, c)
}

// tcpPair is the two ends of a loopback TCP connection, a a threadConn.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a = newThreadConn(nc)
	if _, ok := a.(*threadConn); !ok {
		t.Fatalf("newThreadConn gave a %T", a)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Close ends a read waiting in poll(2); a second Close says it is closed.
func TestThreadConnCloseEndsRead(t *testing.T) {
	a, _ := tcpPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read wait (it ends either way)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("read on a closed connection: no error")
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second close: %v, want net.ErrClosed", err)
	}
}

// Reads and writes carry the bytes in order, whole; the peer's close is
// io.EOF; a past deadline fails a read with os.ErrDeadlineExceeded as a
// net.Conn's does, and clearing it lets reads go on.
func TestThreadConnReadWrite(t *testing.T) {
	a, b := tcpPair(t)
	msg := make([]byte, 8<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() {
		_, _ = a.(*threadConn).WriteBuffers(net.Buffers{msg[:3], msg[3 : 1<<20], nil, msg[1<<20:]})
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != msg[i] {
			t.Fatalf("byte %d: %d, want %d", i, got[i], msg[i])
		}
	}
	_ = a.SetReadDeadline(time.Unix(1, 0))
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = a.SetReadDeadline(time.Time{})
	go func() { _, _ = b.Write(msg[:1<<20]); b.Close() }()
	got, err := io.ReadAll(a)
	if err != nil || len(got) != 1<<20 {
		t.Fatalf("read to the peer's close: %d bytes, %v; want %d and io.EOF", len(got), err, 1<<20)
	}
}
