package trainer

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
)

// A call that has landed costs a step no ticker and no message: waitCall
// allocates nothing for it.
func TestWaitCallLandedAllocatesNothing(t *testing.T) {
	done := make(chan struct{})
	close(done)
	call := &client.Call{Done: done}
	cfg := Config{WaitLogEvery: time.Minute, Logf: func(string, ...any) { t.Error("logged for a landed call") }}
	if n := testing.AllocsPerRun(100, func() {
		if err := waitCall(call, cfg, 7, 0, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("waitCall of a landed call: %v allocations, want 0", n)
	}
	want := errors.New("ps gone")
	call.Err = want
	if err := waitCall(call, cfg, 7, 0, nil); err != want {
		t.Errorf("waitCall returned %v, want the call's error %v", err, want)
	}
}

// A call still in flight is logged with its steps until it lands.
func TestWaitCallLogsWhileWaiting(t *testing.T) {
	done := make(chan struct{})
	call := &client.Call{Done: done}
	logged := make(chan string, 1)
	cfg := Config{WaitLogEvery: time.Millisecond, Sync: true, Logf: func(format string, args ...any) {
		select {
		case logged <- fmt.Sprintf(format, args...):
		default:
		}
	}}
	errc := make(chan error, 1)
	go func() { errc <- waitCall(call, cfg, 41, 42, nil) }()
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
