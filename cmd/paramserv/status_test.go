package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusCommand asks a live ps after a job: step, mode, variables,
// workers with their last request, checkpoints; a ps that does not answer
// is exit 1.
func TestStatusCommand(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:2]
	ck := filepath.Join(t.TempDir(), "ckpt")
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), "--ps_wait_forever", "--checkpoint_dir="+ck)...)
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), "--train_steps=300", "--checkpoint_dir="+ck)...)
	if code := w0.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	st := start(t, "status", nil, "status", "--ps_hosts="+ps[0])
	if code := st.wait(t, time.Minute); code != 0 {
		t.Fatalf("status exited %d", code)
	}
	out := st.output()
	for _, want := range []string{
		"ps 0 at " + ps[0] + ": global step 300, async",
		"pushes: 300 applied, 0 dropped as stale or duplicate, 0 rejected",
		"variables: 2, 8 B: weight (1 values), bias (1 values)",
		"workers (1 of 1 done): 0: last heard ",
		"checkpoint dir: " + ck,
		"checkpoints in " + ck + ":",
		"ckpt-300    300 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	_ = p0
	gone := start(t, "status of nothing", nil, "status", "--ps_hosts="+hosts[2], "--timeout=300ms")
	if code := gone.wait(t, time.Minute); code != 1 || !strings.Contains(gone.output(), "no answer") {
		t.Errorf("status of a ps that is not there exited %d, want 1 saying no answer", code)
	}
	if bad := start(t, "status bad", nil, "status"); bad.wait(t, time.Minute) != 2 {
		t.Errorf("status with no ps did not exit 2")
	}
}
