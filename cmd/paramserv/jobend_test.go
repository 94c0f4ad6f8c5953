package main

import (
	"strings"
	"testing"
	"time"
)

// Issue 31, item 3: a ps that gives up on a worker that never started
// answers the workers waiting on it with the reason before it exits, so
// the chief exits non-zero naming that worker within --startup_timeout
// plus a few seconds, not after retrying the gone ps's address until
// --recovery_timeout.
func TestPSGivingUpTellsTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	timeouts := []string{"--sync_replicas", "--startup_timeout=8s", "--sync_timeout=8s", "--recovery_timeout=5m"}
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), timeouts...)...)
	p0.waitFor(t, "serving on", time.Minute)
	begun := time.Now()
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), append(timeouts, "--model=linreg", "--train_steps=1000")...)...)
	if code := w0.wait(t, 2*time.Minute); code == 0 {
		t.Fatalf("chief exited 0 without worker 1:\n%s", w0.output())
	}
	if took := time.Since(begun); took > 18*time.Second {
		t.Errorf("chief took %s to exit, want within --startup_timeout + 10s:\n%s", took.Round(time.Second), w0.output())
	}
	if out := w0.output(); !strings.Contains(out, "never heard from workers [1]") {
		t.Errorf("chief's output does not name worker 1:\n%s", out)
	}
	if code := p0.wait(t, time.Minute); code == 0 {
		t.Errorf("ps exited 0 though worker 1 never came:\n%s", p0.output())
	}
}

// Issue 31, item 5: a worker that only polls Status (here worker 1,
// waiting for a chief that has not come) names itself on those calls, so
// the ps does not list it as never heard from.
func TestStatusPollingWorkerIsHeardFrom(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), "--startup_timeout=1m")...)
	p0.waitFor(t, "serving on", time.Minute)
	start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), "--startup_timeout=1m", "--model=linreg")...)
	// Before, the ps said "never heard from workers [0 1]" for as long as
	// worker 1 polled.
	p0.waitFor(t, "never heard from workers [0])", 30*time.Second)
}
