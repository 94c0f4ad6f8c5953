package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// Incremental checkpoints end to end (issue 18): a sparse_lr job saves a
// full checkpoint and then deltas; ckpt ls shows each one's kind, parent
// and base; pruning keeps the base a kept delta needs; a damaged delta
// makes the next job fall back to the newest complete chain, saying which
// and why; and a chain restores onto another number of ps.
func TestIncrementalCheckpoints(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	dir := filepath.Join(t.TempDir(), "ckpt")
	model := []string{"--model=sparse_lr", "--data_dir=" + data, "--train_data=a9a/a9a", "--num_features=123",
		"--checkpoint_dir=" + dir, "--save_steps=20", "--incremental_checkpoints", "--full_checkpoint_every=3", "--keep_checkpoints=1"}
	p := start(t, "first job", nil, append([]string{"local", "--ps=2", "--workers=1", "--train_steps=100"}, model...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := p.output()
	for _, want := range []string{
		"saved checkpoint of step 0 in " + dir + " (full,",
		"saved checkpoint of step 20 in " + dir + " (a delta of ckpt-0 on ckpt-0,",
		"saved checkpoint of step 40 in " + dir + " (a delta of ckpt-20 on ckpt-0,",
		"saved checkpoint of step 60 in " + dir + " (full,",
		"saved checkpoint of step 80 in " + dir + " (a delta of ckpt-60 on ckpt-60,",
		"saved checkpoint of step 100 in " + dir + " (a delta of ckpt-80 on ckpt-60,",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the first job's output lacks %q", want)
		}
	}
	ls := func() string {
		t.Helper()
		code, out, errOut := runCLI(t, nil, "ckpt", "ls", dir)
		if code != 0 {
			t.Fatalf("ckpt ls: exit %d: %s", code, errOut)
		}
		return out
	}
	// --keep_checkpoints=1 keeps ckpt-100 and the chain it needs.
	lsOut := ls()
	for _, re := range []string{`(?m)^ckpt-100 +100 .* delta +ckpt-80 +ckpt-60 .* ok$`, `(?m)^ckpt-80 +80 .* delta +ckpt-60 +ckpt-60 .* ok$`,
		`(?m)^ckpt-60 +60 .* full +- +- .* ok$`} {
		if !regexp.MustCompile(re).MatchString(lsOut) {
			t.Fatalf("ckpt ls does not match %s:\n%s", re, lsOut)
		}
	}
	if strings.Contains(lsOut, "ckpt-40") || strings.Contains(lsOut, "ckpt-20 ") || strings.Contains(lsOut, "ckpt-0 ") {
		t.Fatalf("pruning kept checkpoints no kept one needs:\n%s", lsOut)
	}
	code, inspect, errOut := runCLI(t, nil, "ckpt", "inspect", dir)
	if code != 0 || !strings.Contains(inspect, "kind delta: changes since ckpt-80, in a chain from the full ckpt-60") ||
		!regexp.MustCompile(`(?m)^0 +weights/values +F32 +\[\d+ 1\]`).MatchString(inspect) {
		t.Fatalf("ckpt inspect: exit %d:\n%s%s", code, inspect, errOut)
	}

	// A truncated delta in the middle of the chain: ckpt-100 is intact
	// but built on it, so the next job restores ckpt-60, the newest
	// complete chain, saying which and why.
	shard := filepath.Join(dir, "ckpt-80", "shard-1-of-2.safetensors")
	if err := os.Truncate(shard, 100); err != nil {
		t.Fatal(err)
	}
	lsOut = ls()
	for _, re := range []string{
		`(?m)^ckpt-100 .* damaged: ckpt-100 is a delta of ckpt-80, which is damaged: shard-1-of-2.safetensors: truncated`,
		`(?m)^ckpt-80 .* damaged: shard-1-of-2.safetensors: truncated`,
	} {
		if !regexp.MustCompile(re).MatchString(lsOut) {
			t.Fatalf("ckpt ls does not match %s:\n%s", re, lsOut)
		}
	}
	p = start(t, "second job", nil, append([]string{"local", "--ps=2", "--workers=1", "--train_steps=140"}, model...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("second job: exit %d", code)
	}
	out = p.output()
	for _, re := range []string{
		`checkpoint: ckpt-100 damaged: ckpt-100 is a delta of ckpt-80, which is damaged: shard-1-of-2.safetensors: truncated: 100 bytes on disk, manifest says \d+; (set aside as ckpt-100\.set-aside-\S+; )?trying an older one`,
		`checkpoint: ckpt-80 damaged: shard-1-of-2.safetensors: truncated: 100 bytes on disk, manifest says \d+; (set aside as ckpt-80\.set-aside-\S+; )?trying an older one`,
		`restored checkpoint of step 60 from `,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("the second job's output does not match %s", re)
		}
	}

	// The newest checkpoint is now a delta (of 2 ps): restore it onto 1.
	if lsOut := ls(); !regexp.MustCompile(`(?m)^ckpt-140 +140 .* delta .* ok$`).MatchString(lsOut) {
		t.Fatalf("the second job's last checkpoint is not a delta:\n%s", lsOut)
	}
	p = start(t, "third job", nil, append([]string{"local", "--ps=1", "--workers=1", "--train_steps=150"}, model...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("third job: exit %d", code)
	}
	if out := p.output(); !strings.Contains(out, "restored checkpoint of step 140") || !strings.Contains(out, "re-sharded from 2 ps to 1") {
		t.Fatalf("the third job does not restore the chain onto 1 ps:\n%s", out)
	}
}

// The incremental checkpoint flags refuse what would do nothing, exit 2.
func TestIncrementalCheckpointFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--incremental_checkpoints"}, "--incremental_checkpoints needs --checkpoint_dir"},
		{[]string{"--checkpoint_dir=" + dir, "--full_checkpoint_every=3"}, "--full_checkpoint_every is read only with --incremental_checkpoints"},
		{[]string{"--checkpoint_dir=" + dir, "--incremental_checkpoints", "--full_checkpoint_every=0"}, "--full_checkpoint_every=0: want a number >= 1"},
	} {
		code, _, errOut := runCLI(t, nil, append([]string{"local", "--ps=1", "--workers=1", "--train_steps=5"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("local %v: exit %d, stderr:\n%s\nwant 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
