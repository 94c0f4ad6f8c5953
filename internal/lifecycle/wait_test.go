package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// A call that has landed costs a step no timer and no message: WaitCall
// allocates nothing for it.
func TestWaitCallLandedAllocatesNothing(t *testing.T) {
	done := make(chan struct{})
	close(done)
	call := &client.Call{Done: done}
	cfg := CallLog{Every: time.Minute, Logf: func(string, ...any) { t.Error("logged for a landed call") }}
	if n := testing.AllocsPerRun(100, func() {
		if err := WaitCall(call, cfg, 7, 0, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("WaitCall of a landed call: %v allocations, want 0", n)
	}
	want := errors.New("ps gone")
	call.Err = want
	if err := WaitCall(call, cfg, 7, 0, nil); err != want {
		t.Errorf("WaitCall returned %v, want the call's error %v", err, want)
	}
}

// A call still in flight is logged with its steps until it lands.
func TestWaitCallLogsWhileWaiting(t *testing.T) {
	done := make(chan struct{})
	call := &client.Call{Done: done}
	logged := make(chan string, 1)
	cfg := CallLog{Every: time.Millisecond, Sync: true, Logf: func(format string, args ...any) {
		select {
		case logged <- fmt.Sprintf(format, args...):
		default:
		}
	}}
	errc := make(chan error, 1)
	go func() { errc <- WaitCall(call, cfg, 41, 42, nil) }()
	msg := <-logged // waits for the first log line, however long it takes
	close(done)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"push of step 41 and pull of step 42 has waited", "synchronous"} {
		if !strings.Contains(msg, part) {
			t.Errorf("log line %q lacks %q", msg, part)
		}
	}
}

// A call made by Send lands in WaitCall, on its goroutine; while it waits
// (here for a step another push brings) it is logged as any call is.
func TestWaitCallLandsASentCall(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := server.New(server.Config{NumWorkers: 1})
	served := make(chan struct{})
	go func() { server.ServeListener(ctx, lis, s); close(served) }()
	defer func() { cancel(); <-served }()
	tables := []model.Table{{Name: "t", Dim: 1}}
	c, err := client.New([]string{lis.Addr().String()}, nil, client.Options{Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Init(ctx, nil, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	vals := []float32{5}
	call := c.Send(ctx, &client.Request{Pull: true, MinStep: 1, SparseParams: []client.Rows{{Table: "t", Keys: []uint64{9}, Values: vals}}})
	if !call.Deferred() {
		t.Fatal("Send made a call that lands by itself")
	}
	logged := make(chan string, 1)
	cfg := CallLog{Every: time.Millisecond, Logf: func(format string, args ...any) {
		select {
		case logged <- fmt.Sprintf(format, args...):
		default:
		}
	}}
	errc := make(chan error, 1)
	go func() { errc <- WaitCall(call, cfg, 3, 1, nil) }()
	msg := <-logged // waits for the first log line, however long it takes
	if !strings.Contains(msg, "push of step 3 and pull of step 1 has waited") {
		t.Errorf("log line %q", msg)
	}
	if _, _, err := c.Push(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the sent call did not land within a minute of the push it waited for")
	}
	if call.Step != 1 || vals[0] != 0 {
		t.Fatalf("the call landed at step %d with row %v, want step 1 and row 0", call.Step, vals)
	}
}

// LogWait calls tick every period, with the time waited growing, until
// tick says stop; after stop returns it never calls tick again.
func TestLogWaitTicksUntilToldOrStopped(t *testing.T) {
	waited := make(chan time.Duration, 10)
	var calls int // guarded by LogWait: one tick at a time
	stop := LogWait(time.Millisecond, func(d time.Duration) bool {
		calls++
		waited <- d
		return calls < 3
	})
	first, second, third := <-waited, <-waited, <-waited
	stop()
	if !(first > 0 && second >= first && third >= second) {
		t.Errorf("waited %v, %v, %v: want a growing wait", first, second, third)
	}
	time.Sleep(10 * time.Millisecond) // room for a fourth tick, which must not come
	if calls != 3 {
		t.Errorf("tick called %d times, want 3 (it said stop on the third)", calls)
	}

	stop = LogWait(time.Hour, func(time.Duration) bool {
		t.Error("tick called after stop")
		return true
	})
	stop()
}
