package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Every retry backs off (doubling, capped) while no progress is made, and
// the line saying why is logged at most once per --wait_log_every: a
// thousand failures in a row log a line per interval of the (fake) clock,
// not a thousand.
func TestRetrierBacksOffAndLogsOncePerInterval(t *testing.T) {
	var lines int
	cfg := Config{WaitLogEvery: time.Second, Logf: func(string, ...any) { lines++ }}
	r := newRetrier(cfg, "--recovery_timeout=5m")
	now := time.Unix(1000, 0)
	var sleeps []time.Duration
	r.now = func() time.Time { return now }
	r.sleep = func(_ context.Context, d time.Duration) error {
		sleeps = append(sleeps, d)
		now = now.Add(d)
		return nil
	}
	start := now
	for range 1000 {
		if err := r.pause(context.Background(), 7, errors.New("ps 0 unavailable")); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := now.Sub(start)
	if max := int(elapsed/cfg.WaitLogEvery) + 1; lines > max {
		t.Errorf("%d lines in %s of retries, want at most one per --wait_log_every (%d)", lines, elapsed, max)
	}
	if len(sleeps) != 999 || sleeps[0] != retryMin || sleeps[len(sleeps)-1] != retryMax {
		t.Fatalf("%d sleeps from %v to %v, want 999 from %v to %v", len(sleeps), sleeps[0], sleeps[len(sleeps)-1], retryMin, retryMax)
	}
	for i := 1; i < len(sleeps); i++ {
		if sleeps[i] < sleeps[i-1] {
			t.Fatalf("sleep %d is %v, after %v: the backoff shrank", i, sleeps[i], sleeps[i-1])
		}
	}
	// Progress (another step) retries at once.
	n := len(sleeps)
	if err := r.pause(context.Background(), 8, errors.New("ps 0 unavailable")); err != nil || len(sleeps) != n {
		t.Fatalf("after progress: %v, %d sleeps, want none", err, len(sleeps)-n)
	}
}
