package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuf collects the log lines of the tasks of a test cluster.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(prefix string) func(string, ...any) {
	return func(format string, args ...any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+fmt.Sprintf(format, args...))
	}
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logBuf) count(s string) int {
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

// withDeadline fails the test with a message instead of hanging.
func withDeadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
