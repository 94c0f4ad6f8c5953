package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
)

// A save the ps refuses for now (retryable) is tried again at the next
// step; the chief says so in its log, at most once per --wait_log_every
// with the count of failures the line stands for, rather than dropping the
// failure without a word or logging every step.
func TestSaverLogsRetriedSavesOncePerInterval(t *testing.T) {
	var lines []string
	cfg := Config{WaitLogEvery: 5 * time.Second, Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }}
	s := &saver{cfg: cfg}
	err := fmt.Errorf("checkpoint of step 7: %w", client.ErrNotReady)
	if !Retryable(err) {
		t.Fatal("the test's error is not retryable")
	}
	now := time.Unix(1000, 0)
	for i := range 12 { // one failure a second for 12 s
		s.retried(int64(7+i), err, now.Add(time.Duration(i)*time.Second))
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines for 12 failures over 12 s at one line per 5 s, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "step 7 not saved") || !strings.Contains(lines[0], "(1 failed") {
		t.Errorf("first line %q does not name the step and one failure", lines[0])
	}
	if !strings.Contains(lines[1], "step 12 not saved") || !strings.Contains(lines[1], "(5 failed") {
		t.Errorf("second line %q does not count the five failures since the first", lines[1])
	}
	if !errors.Is(err, client.ErrNotReady) || !strings.Contains(lines[2], client.ErrNotReady.Error()) {
		t.Errorf("third line %q does not give the reason", lines[2])
	}
}
