package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/client"
)

// LogWait is how a wait says what it waits for: from now until stop is
// called, every every it calls tick with the time waited so far, from a
// timer's goroutine, one call at a time; tick returns whether to go on
// (false: no further call). Once stop has returned, tick is not running
// and will not be called again.
func LogWait(every time.Duration, tick func(waited time.Duration) (again bool)) (stop func()) {
	start := time.Now()
	var mu sync.Mutex // guards stopped and t's re-arming
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if tick(time.Since(start)) {
			t.Reset(every)
		}
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// CallLog is what the wait for a step's call says, and how often.
type CallLog struct {
	Logf   func(format string, args ...any)
	Every  time.Duration // WaitLogEvery
	Worker int
	Sync   bool // the cluster trains synchronously (the line explains the wait)
}

// RestartWatch lets a synchronous step that waits find out that a ps
// restarted (or was restored) since this worker last saw it. Without it
// the step can wait for ever: when a ps dies just after completing a step,
// a worker whose answer from it was lost goes into recovery, and its push
// to another ps, not yet sent, never is. The chief's step then waits on
// that other ps, which is alive and answers every health check, for the
// lost gradient; the chief has no call to the ps that restarted, so it
// never rolls the cluster back, and the worker in recovery waits for that
// (until --recovery_timeout ends it, and --sync_timeout the job).
type RestartWatch struct {
	Check  func(ctx context.Context) error // a *client.RestartedError if a ps restarted
	Cancel context.CancelCauseFunc         // ends the call
}

// WaitCall waits for call, the push of step and pull of minStep, logging
// every l.Every that it waits. Under w (if not nil) it also checks, as
// often, whether a ps restarted: if so it ends the call and returns that
// (retryable) error once the call has landed. A call made by Send lands on
// this goroutine.
func WaitCall(call *client.Call, l CallLog, step, minStep int64, w *RestartWatch) error {
	if call.Deferred() && w != nil {
		go func() { _ = call.Wait() }() // (its error is read below)
	}
	if !call.Deferred() || w != nil {
		// Most calls have landed, or land before the first log is due:
		// no timer and no message for them (this runs every step).
		select {
		case <-call.Done:
			return call.Err
		default:
		}
	}
	var restarted error // set by the timer's tick, read after stop
	stop := LogWait(l.Every, func(waited time.Duration) bool {
		l.Logf("worker %d: push of step %d and pull of step %d has waited %s for the ps%s", l.Worker, step, minStep, waited.Round(time.Second), syncHint(l.Sync))
		if w == nil {
			return true
		}
		// A check that gets no answer in time is no verdict: the call's
		// own health checks deal with a silent ps.
		ctx, cancel := context.WithTimeout(context.Background(), max(l.Every, time.Second))
		err := w.Check(ctx)
		cancel()
		var re *client.RestartedError
		if errors.As(err, &re) {
			restarted = err
			w.Cancel(err)
			return false
		}
		return true
	})
	var err error
	if call.Deferred() && w == nil {
		err = call.Wait()
	} else {
		<-call.Done
		err = call.Err
	}
	stop()
	if restarted != nil {
		return fmt.Errorf("while the step waited: %w", restarted)
	}
	return err
}

// syncHint explains a long wait in synchronous mode.
func syncHint(sync bool) string {
	if sync {
		return " (synchronous: the step completes when enough workers have pushed)"
	}
	return ""
}
