package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTask writes a shell script that stands in for the paramserv binary:
// body sees the task's flags as "$@" and $job, $index.
func fakeTask(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.sh")
	src := `#!/bin/sh
for a in "$@"; do
  case "$a" in
    --job_name=*) job=${a#--job_name=} ;;
    --task_index=*) index=${a#--task_index=} ;;
  esac
done
` + body + "\n"
	if err := os.WriteFile(path, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

type fakeOut struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *fakeOut) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func runFake(t *testing.T, exe string, workers int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out fakeOut
	err := Run(ctx, Config{NumPS: 1, NumWorkers: workers, Exe: exe, Subcommand: "train", Out: &out,
		Logf: t.Logf, Grace: 5 * time.Second, RestartPS: true, RestartWorkers: true, MaxRestarts: 1})
	if ctx.Err() != nil {
		t.Fatalf("Run did not return within a minute (guard against a hang); output:\n%s", out.b.String())
	}
	return err
}

// A child that exits 2 (input to fix) makes the failure input to fix.
func TestChildExitTwoIsInputToFix(t *testing.T) {
	exe := fakeTask(t, `[ "$job" = ps ] && exec sleep 60
exit 2`)
	err := runFake(t, exe, 1)
	var f *Failure
	if !errors.As(err, &f) || !f.InputToFix || f.Child != "worker0" || !strings.Contains(err.Error(), "worker0 failed: exit status 2 (input to fix)") {
		t.Fatalf("Run: %v, want a Failure of worker0, exit status 2, input to fix", err)
	}
}

// When several children fail, one that exited 2 is the one reported, even
// if another failed first; children stopped by the launcher's own SIGTERM
// are not failures.
func TestInputToFixWinsAmongSeveralFailures(t *testing.T) {
	// worker1 fails only once worker0 ignores SIGTERM, so that the order
	// does not depend on how fast the shells start on a busy machine.
	ready := filepath.Join(t.TempDir(), "trapped")
	exe := fakeTask(t, `[ "$job" = ps ] && exec sleep 60
if [ "$index" = 1 ]; then
  while [ ! -e `+ready+` ]; do sleep 0.01; done
  exit 1
fi
trap '' TERM
touch `+ready+`
sleep 0.5
exit 2`)
	err := runFake(t, exe, 2)
	var f *Failure
	if !errors.As(err, &f) || !f.InputToFix || f.Child != "worker0" {
		t.Fatalf("Run: %v, want a Failure of worker0, input to fix", err)
	}
	if want := "also failed: worker1: exit status 1"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "ps0") {
		t.Fatalf("Run: %v, want it to say %q and not to name ps0 (stopped by local)", err, want)
	}
}

// A worker that exits 143 (128+SIGTERM: a SIGTERM from outside) is
// restarted like one killed by a signal, and the job goes on.
func TestWorkerExit143IsRestarted(t *testing.T) {
	dir := t.TempDir()
	marker, done := filepath.Join(dir, "ran"), filepath.Join(dir, "done")
	exe := fakeTask(t, `if [ "$job" = ps ]; then
  while [ ! -e `+done+` ]; do sleep 0.05; done
  exit 0
fi
if [ ! -e `+marker+` ]; then touch `+marker+`; exit 143; fi
touch `+done+`
exit 0`)
	if err := runFake(t, exe, 1); err != nil {
		t.Fatalf("Run: %v, want worker0 restarted after exit 143 and the job to end well", err)
	}
}

// runFakeWaiting is runFake with a PSExitTimeout past the test's guard:
// a Run that waits for it fails the guard.
func runFakeWaiting(t *testing.T, exe string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out fakeOut
	err := Run(ctx, Config{NumPS: 1, NumWorkers: 2, Exe: exe, Subcommand: "train", Out: &out,
		Logf: t.Logf, Grace: 5 * time.Second, PSExitTimeout: 10 * time.Minute, RestartPS: true, MaxRestarts: 1})
	if ctx.Err() != nil {
		t.Fatalf("Run did not return within a minute: it waited for the restarted ps; output:\n%s", out.b.String())
	}
	return err
}

// restartedPS is a fake task whose ps is killed by SIGKILL once the
// workers run, and whose restarted ps, told the workers' Done by nobody,
// waits until stopped and then exits onTERM; the workers exit 0 once it
// runs.
func restartedPS(t *testing.T, onTERM int) string {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	return fakeTask(t, fmt.Sprintf(`if [ "$job" = ps ]; then
  if [ ! -e %[1]s ]; then touch %[1]s; kill -9 $$; fi
  trap 'exit %[3]d' TERM
  touch %[2]s
  while :; do sleep 0.05; done
fi
while [ ! -e %[2]s ]; do sleep 0.05; done
exit 0`, first, second, onTERM))
}

// Issue 31, item 1: a ps restarted just as the workers finish cannot hear
// their Done; once every worker has exited 0, local stops it at once, and
// the job succeeds if it exits 0 (it knew the job was over: it restored
// the final checkpoint). Before, local waited --ps_exit_timeout and
// failed.
func TestRestartedPSStoppedOnceWorkersFinish(t *testing.T) {
	if err := runFakeWaiting(t, restartedPS(t, 0)); err != nil {
		t.Fatalf("Run: %v, want success: the restarted ps exited 0 when stopped", err)
	}
}

// ... and fails, naming it, if the restarted ps exits 143 (it did not know
// the job was over).
func TestRestartedPSNotKnowingTheJobIsOverFails(t *testing.T) {
	err := runFakeWaiting(t, restartedPS(t, 143))
	var f *Failure
	if !errors.As(err, &f) || f.Child != "ps0" || !strings.Contains(err.Error(), "exit status 143") {
		t.Fatalf("Run: %v, want a Failure of ps0, exit status 143", err)
	}
}

// A ps not restarted that still runs --ps_exit_timeout after every worker
// finished is stopped: local succeeds if it exits 0 then, and fails naming
// it otherwise.
func TestPSStoppedAfterExitTimeout(t *testing.T) {
	for _, code := range []int{0, 143} {
		exe := fakeTask(t, fmt.Sprintf(`if [ "$job" = ps ]; then
  trap 'exit %d' TERM
  while :; do sleep 0.05; done
fi
exit 0`, code))
		var out fakeOut
		err := Run(context.Background(), Config{NumPS: 1, NumWorkers: 1, Exe: exe, Subcommand: "train", Out: &out,
			Logf: t.Logf, Grace: 5 * time.Second, PSExitTimeout: 100 * time.Millisecond})
		if code == 0 && err != nil {
			t.Errorf("ps exiting 0 when stopped: Run: %v, want success", err)
		}
		if code != 0 && (err == nil || !strings.Contains(err.Error(), "ps0 (stopped: exit status 143 (stopped by SIGTERM)) did not exit within 100ms")) {
			t.Errorf("ps exiting 143 when stopped: Run: %v, want it named", err)
		}
	}
}
