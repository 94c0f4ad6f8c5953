package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRateCommand changes a live job's learning rate with paramserv rate,
// against a ps that wants the job's token: without it nothing changes
// (exit 1), with it every ps takes the change at the step named, or one
// past its own, and says so in its log and its status.
func TestRateCommand(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:2]
	token := writeTokenFile(t, "the-shared-secret-of-this-job-0123")
	auth := "--auth_token_file=" + token
	ck := filepath.Join(t.TempDir(), "ckpt")
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), "--ps_wait_forever", "--checkpoint_dir="+ck, auth)...)
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), "--train_steps=300", "--learning_rate=0.05", auth)...)
	if code := w0.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	run := func(name string, args ...string) (int, string) {
		t.Helper()
		p := start(t, name, nil, args...)
		return p.wait(t, time.Minute), p.output()
	}
	if code, out := run("rate without the token", "rate", "--ps_hosts="+ps[0], "--learning_rate=0.5", "--at_step=400", "--timeout=2s"); code != 1 || !strings.Contains(out, "did not take the change") {
		t.Errorf("rate without the job's token: exit %d, want 1 saying the ps did not take it:\n%s", code, out)
	}
	if code, out := run("rate", "rate", "--ps_hosts="+ps[0], "--learning_rate=0.5", auth); code != 0 || !strings.Contains(out, "learning rate 0.5, schedule constant, from global step 301") {
		t.Errorf("rate: exit %d, want 0 saying the change is from step 301:\n%s", code, out)
	}
	if code, out := run("rate at 300", "rate", "--ps_hosts="+ps[0], "--learning_rate=0.25", "--lr_schedule=exponential(decay_steps=100,decay_rate=0.5)", "--at_step=300", auth); code != 0 || !strings.Contains(out, "from global step 300") {
		t.Errorf("rate --at_step=300: exit %d, want 0:\n%s", code, out)
	}
	p0.waitFor(t, "learning rate changed from global step 300: 0.25", 30*time.Second)
	if code, out := run("status", "status", "--ps_hosts="+ps[0], auth); code != 0 || !strings.Contains(out, "learning rate: 0.03125 ") {
		t.Errorf("status after the change: exit %d, want the rate 0.25*0.5^(300/100) = 0.03125 in force:\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"rate", "--ps_hosts=" + ps[0]},
		{"rate", "--ps_hosts=" + ps[0], "--learning_rate=0"},
		{"rate", "--ps_hosts=" + ps[0], "--learning_rate=0.1", "--lr_schedule=cosine()"},
		{"rate", "--ps_hosts=" + ps[0], "--learning_rate=0.1", "--at_step=-3"},
		{"rate", "--learning_rate=0.1"},
	} {
		if code, out := run("rate bad", bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", bad, code, out)
		}
	}
}
