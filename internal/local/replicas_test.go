package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Under --replicas a ps that dies is not the end of the job (its shards
// fail over): it is restarted to rejoin, up to MaxRestarts times, every
// task is given --replica_hosts, and a ps that exits 2 (input to fix)
// still ends the job.
func TestReplicasPSDeathTolerated(t *testing.T) {
	run := func(body string) (string, error) {
		exe := fakeTask(t, body)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out fakeOut
		err := Run(ctx, Config{NumPS: 3, NumWorkers: 1, Exe: exe, Subcommand: "train", Out: &out,
			Logf: func(f string, a ...any) { out.Write([]byte(fmt.Sprintf(f, a...) + "\n")) }, Grace: 5 * time.Second,
			RestartPS: true, MaxRestarts: 3, Replicas: 2})
		if ctx.Err() != nil {
			t.Fatalf("Run did not return within a minute (guard against a hang); output:\n%s", out.b.String())
		}
		return out.b.String(), err
	}
	// ps 1 dies at once, each time; the others and the worker end well
	// once the worker is done.
	out, err := run(`case "$*" in *--replica_hosts=*) ;; *) echo "no --replica_hosts"; exit 1 ;; esac
[ "$job" = ps ] && [ "$index" = 1 ] && exit 1
[ "$job" = ps ] && exec sleep 1
sleep 0.5; exit 0`)
	if err != nil {
		t.Fatalf("Run: %v, want the job to go on without ps 1\n%s", err, out)
	}
	for _, want := range []string{
		"ps1 exited (exit status 1); its shards fail over to their copies (--replicas=2); restarting it to copy them back (restart 1 of 3)",
		"restart 3 of 3", "ps1 exited (exit status 1); not restarted"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(`[ "$job" = ps ] && [ "$index" = 1 ] && exit 2
exec sleep 30`)
	var f *Failure
	if !errors.As(err, &f) || !f.InputToFix {
		t.Errorf("Run: %v, want a failure to fix when a ps exits 2\n%s", err, out)
	}
}
