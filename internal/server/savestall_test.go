package server

import (
	"strings"
	"testing"
	"time"
)

// The save's line reports the longest push and how much of it waited for
// the lock; pushes outside a save are not counted.
func TestSaveStalls(t *testing.T) {
	var st saveStalls
	t0 := time.Now()
	st.push(t0.Add(-time.Hour), t0) // no save under way
	if got := st.pushes.Load(); got != 0 {
		t.Fatalf("a push outside a save counted: %d", got)
	}
	st.begin()
	st.push(time.Now().Add(-3*time.Second), time.Now().Add(-time.Second))
	st.push(time.Now().Add(-time.Second), time.Now())
	got := st.end()
	if !strings.HasPrefix(got, "2 pushes meanwhile, the longest 3") || !strings.Contains(got, "(2") || !strings.Contains(got, "waiting for the lock") {
		t.Fatalf("the save's stalls read %q, want the longest (3 s) and its wait (2 s)", got)
	}
	st.begin()
	if got := st.end(); got != "no push meanwhile" {
		t.Fatalf("a save with no push reads %q", got)
	}
}
