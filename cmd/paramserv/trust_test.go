package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A job restarted from its checkpoint with a changed --learning_rate runs
// at the new rate and says so; one restarted with another --optimizer
// exits 2 naming the flag. Before, both ran at the old settings silently.
func TestRestartWithChangedFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"local", "--ps=1", "--workers=1", "--model=linreg", "--optimizer=sgd", "--checkpoint_dir=" + dir}
	first := start(t, "first job", nil, append(args, "--train_steps=300", "--learning_rate=0.01")...)
	if code := first.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("first job: exit %d\n%s", code, first.output())
	}
	second := start(t, "rate changed", nil, append(args, "--train_steps=600", "--learning_rate=1e-9")...)
	if code := second.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("restart with another rate: exit %d\n%s", code, second.output())
	}
	if !regexp.MustCompile(`learning rate 0\.01 → 1e-09 from step \d+`).MatchString(second.output()) {
		t.Fatalf("the changed rate is not logged:\n%s", second.output())
	}
	third := start(t, "optimizer changed", nil, append(args[:len(args)-2:len(args)-2], "--optimizer=adam", "--checkpoint_dir="+dir, "--train_steps=900")...)
	code := third.wait(t, 2*time.Minute)
	if out := third.output(); code != 2 || !strings.Contains(out, "--optimizer") || !strings.Contains(out, "adam") {
		t.Fatalf("restart with another optimizer: exit %d, want 2 naming --optimizer:\n%s", code, out)
	}
}
