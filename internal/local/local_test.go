package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind (the output
// copiers and exit watchers Run starts).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script writes an executable shell script standing in for the paramserv
// binary: it gets "train", then --job_name, --task_index, ...
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-paramserv")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs the cluster, failing the test if Run does not return within a
// minute.
func run(t *testing.T, cfg Config) (string, error) {
	t.Helper()
	var out syncBuffer
	cfg.Out = &out
	cfg.Grace = time.Second
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cfg) }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return within a minute; output so far:\n%s", out.String())
		return "", nil
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunEveryChildExitsZero(t *testing.T) {
	exe := script(t, `echo "$2 $3 says hello"`)
	out, err := run(t, Config{NumPS: 1, NumWorkers: 2, Exe: exe, Subcommand: "train"})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	for _, want := range []string{"[ps0] --job_name=ps --task_index=0 says hello", "[worker0] --job_name=worker --task_index=0 says hello", "[worker1] --job_name=worker --task_index=1 says hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A worker that fails stops the others (here a ps that would run for ten
// minutes, past run's guard) and Run says which.
func TestRunStopsTheRestWhenAWorkerFails(t *testing.T) {
	exe := script(t, `case "$2 $3" in
"--job_name=worker --task_index=1") sleep 0.2; exit 3;;
"--job_name=ps --task_index=0") exec sleep 600;;
esac`)
	out, err := run(t, Config{NumPS: 1, NumWorkers: 2, Exe: exe, Subcommand: "train"})
	if err == nil || !strings.Contains(err.Error(), "worker1 failed: exit status 3") {
		t.Fatalf("Run = %v, want worker1 failed: exit status 3\n%s", err, out)
	}
}
