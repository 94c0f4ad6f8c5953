package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Issue 31, item 3: a ps that gives up on a worker that never started
// answers the workers waiting on it with the reason before it exits, so
// the chief exits non-zero naming that worker within --startup_timeout
// plus a few seconds, not after retrying the gone ps's address until
// --recovery_timeout.
func TestPSGivingUpTellsTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	timeouts := []string{"--sync_replicas", "--startup_timeout=8s", "--sync_timeout=8s", "--recovery_timeout=5m"}
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), timeouts...)...)
	p0.waitFor(t, "serving on", time.Minute)
	begun := time.Now()
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), append(timeouts, "--model=linreg", "--train_steps=1000")...)...)
	if code := w0.wait(t, 2*time.Minute); code == 0 {
		t.Fatalf("chief exited 0 without worker 1:\n%s", w0.output())
	}
	if took := time.Since(begun); took > 18*time.Second {
		t.Errorf("chief took %s to exit, want within --startup_timeout + 10s:\n%s", took.Round(time.Second), w0.output())
	}
	if out := w0.output(); !strings.Contains(out, "never heard from workers [1]") {
		t.Errorf("chief's output does not name worker 1:\n%s", out)
	}
	if code := p0.wait(t, time.Minute); code == 0 {
		t.Errorf("ps exited 0 though worker 1 never came:\n%s", p0.output())
	}
}

// Issue 31, item 5: a worker that only polls Status (here worker 1,
// waiting for a chief that has not come) names itself on those calls, so
// the ps does not list it as never heard from.
func TestStatusPollingWorkerIsHeardFrom(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), "--startup_timeout=1m")...)
	p0.waitFor(t, "serving on", time.Minute)
	start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), "--startup_timeout=1m", "--model=linreg")...)
	// Before, the ps said "never heard from workers [0 1]" for as long as
	// worker 1 polled.
	p0.waitFor(t, "never heard from workers [0])", 30*time.Second)
}

// Issue 31, item 4: the saved model is the evaluated model. Two
// asynchronous workers over two ps: the chief saves the final checkpoint
// and evaluates while the other worker may still push. Each ps drops the
// pushes past the goal, and the chief saves and evaluates once every ps is
// there, so eval of the final checkpoint gives the result file's metrics
// exactly. Before, the other worker's pushes landed between the save and
// the chief's final pull (test accuracy 0.9605 in the checkpoint against
// 0.9592 in the result file).
func TestSavedModelIsEvaluated(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	data := testutil.DataDir(t, "mnist")
	dir := t.TempDir()
	ckpt, res, evalRes := filepath.Join(dir, "ck"), filepath.Join(dir, "train.json"), filepath.Join(dir, "eval.json")
	model := []string{"--model=mnist", "--data_dir=" + filepath.Join(data, "mnist"), "--hidden_units=50"}
	p := start(t, "local", nil, append([]string{"local", "--ps=2", "--workers=2", "--train_steps=300",
		"--checkpoint_dir=" + ckpt, "--result_file=" + res}, model...)...)
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	code, out, errOut := runCLI(t, nil, append([]string{"eval", "--checkpoint_dir=" + ckpt, "--result_file=" + evalRes}, model...)...)
	if code != 0 {
		t.Fatalf("eval: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	type result struct {
		GlobalStep int64              `json:"global_step"`
		Metrics    map[string]float64 `json:"metrics"`
	}
	var tr, ev result
	for path, r := range map[string]*result{res: &tr, evalRes: &ev} {
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, r) != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	if len(tr.Metrics) == 0 || len(tr.Metrics) != len(ev.Metrics) {
		t.Fatalf("metrics: training's %v, eval's %v", tr.Metrics, ev.Metrics)
	}
	for k, v := range tr.Metrics {
		if ev.Metrics[k] != v {
			t.Errorf("metric %s: the final checkpoint (step %d) gives %v, the result file (step %d) %v", k, ev.GlobalStep, ev.Metrics[k], tr.GlobalStep, v)
		}
	}
}

// heardFrom waits until ps (via paramserv status) has heard from worker w.
func heardFrom(t *testing.T, ps []string, w int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	want := fmt.Sprintf("%d: last heard", w)
	for {
		_, out, _ := runCLI(t, nil, "status", "--ps_hosts="+strings.Join(ps, ","))
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ps have not heard from worker %d after %s:\n%s", w, limit, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Issue 31, item 2, a ps stopped: after ps 1 is sent SIGTERM (it exits
// 143), the workers give up after --recovery_timeout and say so to ps 0,
// which then exits non-zero within a few seconds, naming who ended how.
// Before, ps 0 ran on, waiting for workers that had exited.
func TestPSExitsWhenEveryWorkerGaveUp(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 4)
	ps, workers := hosts[:2], hosts[2:]
	flags := []string{"--recovery_timeout=5s"}
	var pss, ws []*proc
	for i := range ps {
		pss = append(pss, start(t, fmt.Sprintf("ps%d", i), nil, append(clusterArgs(ps, workers, "ps", i), flags...)...))
	}
	for i := range workers {
		ws = append(ws, start(t, fmt.Sprintf("worker%d", i), nil, append(clusterArgs(ps, workers, "worker", i), append(flags, "--model=linreg", "--train_steps=1000000000")...)...))
	}
	heardFrom(t, ps, 0, time.Minute)
	heardFrom(t, ps, 1, time.Minute)
	pss[0].waitFor(t, "initialised by worker 0", time.Minute)
	if err := pss[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := pss[1].wait(t, time.Minute); code != 143 {
		t.Errorf("ps 1 exited %d after SIGTERM, want 143", code)
	}
	for _, w := range ws {
		if code := w.wait(t, 2*time.Minute); code != 1 {
			t.Errorf("%s exited %d, want 1 (gave up after --recovery_timeout)", w.name, code)
		}
	}
	if code := pss[0].wait(t, time.Minute); code != 1 {
		t.Fatalf("ps 0 exited %d once every worker gave up, want 1", code)
	}
	out := pss[0].output()
	for _, want := range []string{"every worker has ended before the job's goal", "worker 0 gave up (", "worker 1 gave up ("} {
		if !strings.Contains(out, want) {
			t.Errorf("ps 0's output lacks %q", want)
		}
	}
}

// Issue 31, item 2, a worker stopped: worker 1 is sent SIGTERM, the chief
// trains to the goal alone and saves the final checkpoint, and both ps
// then exit 0 within a few seconds, naming worker 1 as gone after the
// goal. Before, they waited --worker_timeout (30 minutes) for it.
func TestPSExitsWhenAWorkerIsGoneAfterTheGoal(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 4)
	ps, workers := hosts[:2], hosts[2:]
	dir := t.TempDir()
	flags := []string{"--checkpoint_dir=" + dir}
	var pss []*proc
	for i := range ps {
		pss = append(pss, start(t, fmt.Sprintf("ps%d", i), nil, append(clusterArgs(ps, workers, "ps", i), flags...)...))
	}
	// Worker 1 first: it waits for the chief's Init, polling the ps.
	w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), append(flags, "--model=linreg", "--train_steps=3000")...)...)
	heardFrom(t, ps, 1, time.Minute)
	if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w1.wait(t, time.Minute); code == 0 {
		t.Errorf("worker 1 exited 0 after SIGTERM")
	}
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), append(flags, "--model=linreg", "--train_steps=3000")...)...)
	if code := w0.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("the chief exited %d", code)
	}
	for _, p := range pss {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Errorf("%s exited %d, want 0 (the goal reached, the final checkpoint saved)", p.name, code)
		}
		if out := p.output(); !strings.Contains(out, "worker 0 done, worker 1 gone after the goal") {
			t.Errorf("%s does not name worker 1 as gone after the goal", p.name)
		}
	}
}

// Issue 31, item 1: a ps restarted after the job ended reads from the
// final checkpoint (its goal step) that the job is over. A worker started
// again finishes at once; the ps, stopped by SIGTERM (as local stops it
// once every worker has exited), exits 0; left alone, it exits 0 once the
// workers it did not hear from have had --startup_timeout. Before, it
// waited for them, and a SIGTERM made it exit 143.
func TestPSRestartedAfterTheJobEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	dir := t.TempDir()
	flags := []string{"--checkpoint_dir=" + dir}
	train := append(flags, "--model=linreg", "--train_steps=300")
	procs := []*proc{start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), flags...)...)}
	for i := range workers {
		procs = append(procs, start(t, fmt.Sprintf("worker%d", i), nil, append(clusterArgs(ps, workers, "worker", i), train...)...))
	}
	for _, p := range procs {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	const over = "the job is over"

	// Stopped by SIGTERM: exit 0.
	p := start(t, "ps0-again", nil, append(clusterArgs(ps, workers, "ps", 0), flags...)...)
	p.waitFor(t, over, time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("the restarted ps exited %d after SIGTERM, want 0: the job was over", code)
	}

	// Left alone, with worker 1 started again: the worker finishes, and
	// the ps exits 0 once worker 0 has not come for --startup_timeout.
	p = start(t, "ps0-third", nil, append(clusterArgs(ps, workers, "ps", 0), append(flags, "--startup_timeout=5s")...)...)
	p.waitFor(t, over, time.Minute)
	w1 := start(t, "worker1-again", nil, append(clusterArgs(ps, workers, "worker", 1), train...)...)
	if code := w1.wait(t, time.Minute); code != 0 {
		t.Errorf("worker 1 started after the job ended exited %d, want 0", code)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("the restarted ps exited %d, want 0", code)
	}
	if out := p.output(); !strings.Contains(out, "worker 0 never heard from (the job was over), worker 1 done") {
		t.Errorf("the restarted ps does not say how each worker ended")
	}
}

// Issue 31, item 2, with --replicas: both workers give up (a learning rate
// that makes every push non-finite, which the ps refuse), and each
// replicated ps, hand-started, then exits 1 naming who ended how. Before,
// a replicated ps had no watch over its workers and ran on.
func TestReplicatedPSExitsWhenEveryWorkerGaveUp(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 4+4)
	ps, workers, repl := hosts[:2], hosts[2:4], hosts[4:]
	flags := []string{"--replicas=2", "--replica_hosts=" + strings.Join(repl, ",")}
	var pss []*proc
	for i := range ps {
		pss = append(pss, start(t, fmt.Sprintf("ps%d", i), nil, append(clusterArgs(ps, workers, "ps", i), flags...)...))
	}
	for i := range workers {
		w := start(t, fmt.Sprintf("worker%d", i), nil, append(clusterArgs(ps, workers, "worker", i),
			append(flags, "--model=linreg", "--learning_rate=1e30", "--train_steps=1000000")...)...)
		if code := w.wait(t, 2*time.Minute); code != 1 {
			t.Fatalf("%s exited %d, want 1 (its pushes refused as non-finite)", w.name, code)
		}
	}
	for _, p := range pss {
		if code := p.wait(t, time.Minute); code != 1 {
			t.Fatalf("%s exited %d once every worker gave up, want 1", p.name, code)
		}
		out := p.output()
		for _, want := range []string{"every worker has ended before the job's goal", "worker 0 gave up (", "worker 1 gave up ("} {
			if !strings.Contains(out, want) {
				t.Errorf("%s's output lacks %q", p.name, want)
			}
		}
	}
}

// Issue 31, item 1, under local: ps 0 killed with SIGKILL just as the
// workers finish (once the chief has saved the final checkpoint) is
// restarted, restores that checkpoint, and the job ends with local
// exiting 0 within seconds, however the kill falls against the workers'
// Done. Before,
// the restarted ps waited for workers that had told its former self, and
// local failed after 30 s ("every worker finished but ps0 did not exit").
func TestPSKilledAsTheWorkersFinishUnderLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=3000",
		"--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--result_file="+res)
	p.waitFor(t, "saved checkpoint of step 3000 ", 2*time.Minute)
	if err := syscall.Kill(findChild(t, p.cmd.Process.Pid, "ps", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Within 25 s: not by local's 30 s wait for a ps that does not exit
	// by itself, but by its stopping the restarted ps at once.
	if code := p.wait(t, 25*time.Second); code != 0 {
		t.Fatalf("local exited %d, want 0", code)
	}
	if out := p.output(); !strings.Contains(out, "ps0 exited unexpectedly (killed by signal killed); restarting it") {
		t.Errorf("ps 0 was not killed and restarted (the job may have ended first)")
	}
	checkLinreg(t, readResult(t, res))
}

// psStepAtLeast waits until the ps at addr reports global step >= want.
func psStepAtLeast(t *testing.T, addr string, want int64, limit time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{})
		cancel()
		if err == nil && st.GlobalStep >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ps at %s not at step %d after %s (%v, %v)", addr, want, limit, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The chief restarted while a ps was restarted too, with nothing to
// restore: ps 1 comes up blank while ps 0 holds its trained step. Without
// a complete checkpoint the chief refuses, naming ps 1 (exit 1); with one,
// it restores every ps from it and the job ends right. Before, its Init
// gave ps 1 the initial values ("the ps were already initialised; training
// goes on from global step N") and the job went on from a model of two
// histories, ending "ok" with a wrong model.
func TestChiefRestartedBesideABlankPS(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	for _, withCheckpoint := range []bool{false, true} {
		t.Run(map[bool]string{false: "no checkpoint", true: "checkpoint"}[withCheckpoint], func(t *testing.T) {
			hosts := freeHosts(t, 4)
			ps, workers := hosts[:2], hosts[2:]
			dir := t.TempDir()
			res := filepath.Join(dir, "result.json")
			var flags []string
			steps := "--train_steps=1000000000"
			if withCheckpoint {
				flags = []string{"--checkpoint_dir=" + filepath.Join(dir, "ck"), "--save_steps=500"}
				steps = "--train_steps=20000"
			}
			train := append([]string{"--model=linreg", steps, "--recovery_timeout=2m", "--result_file=" + res}, flags...)
			p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), flags...)...)
			p1 := start(t, "ps1", nil, append(clusterArgs(ps, workers, "ps", 1), flags...)...)
			w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), train...)...)
			w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), train...)...)
			if withCheckpoint {
				w0.waitCount(t, "chief: saved checkpoint of step", 2, time.Minute) // step 0 and one past it
			}
			psStepAtLeast(t, ps[0], 1000, time.Minute)
			// The chief dies, worker 1 trains on; then ps 1 dies and
			// comes back blank.
			for _, p := range []*proc{w0, p1} {
				if err := p.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				p.wait(t, time.Minute)
			}
			// With a checkpoint directory, ps 1 comes up blank when it
			// finds no complete checkpoint at its start (one completed
			// after it started, or the directory was not there then):
			// here the directory is away while ps 1 starts.
			ck := filepath.Join(dir, "ck")
			if withCheckpoint {
				if err := os.Rename(ck, ck+".away"); err != nil {
					t.Fatal(err)
				}
			}
			start(t, "ps1-again", nil, append(clusterArgs(ps, workers, "ps", 1), flags...)...).waitFor(t, "serving on", time.Minute)
			if withCheckpoint {
				if err := os.RemoveAll(ck); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(ck+".away", ck); err != nil {
					t.Fatal(err)
				}
			}
			w0 = start(t, "worker0-again", nil, append(clusterArgs(ps, workers, "worker", 0), train...)...)
			if !withCheckpoint {
				if code := w0.wait(t, time.Minute); code != 1 {
					t.Fatalf("the restarted chief exited %d beside a blank ps with no checkpoint, want 1", code)
				}
				if out := w0.output(); !strings.Contains(out, "ps [1] came up blank") || strings.Contains(out, "training goes on") {
					t.Errorf("the restarted chief did not refuse naming ps 1")
				}
				return
			}
			for _, p := range []*proc{w0, w1, p0} {
				if code := p.wait(t, 2*time.Minute); code != 0 {
					t.Fatalf("%s exited %d", p.name, code)
				}
			}
			if !strings.Contains(w0.output(), "restored every ps from the newest complete checkpoint") {
				t.Errorf("the restarted chief did not restore every ps from the checkpoint")
			}
			checkLinreg(t, readResult(t, res))
		})
	}
}

// Issue 31, item 3, with --replicas: as TestPSGivingUpTellsTheWorkers,
// each ps's copies giving up on worker 1 never heard from. Every copy
// hears of the workers the primaries hear from (the primaries log it), so
// each ps gives up on the same workers, and answers the chief with why.
// Before, a replicated ps had no such watch: the chief's synchronous step
// failed after --sync_timeout and it retried until --recovery_timeout.
func TestReplicatedPSGivingUpTellsTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 4+4)
	ps, workers, repl := hosts[:2], hosts[2:4], hosts[4:]
	flags := []string{"--replicas=2", "--replica_hosts=" + strings.Join(repl, ","),
		"--sync_replicas", "--startup_timeout=8s", "--sync_timeout=8s", "--recovery_timeout=5m"}
	var pss []*proc
	for i := range ps {
		pss = append(pss, start(t, fmt.Sprintf("ps%d", i), nil, append(clusterArgs(ps, workers, "ps", i), flags...)...))
	}
	for _, p := range pss {
		p.waitFor(t, "serving shard", time.Minute)
	}
	begun := time.Now()
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), append(flags, "--model=linreg", "--train_steps=1000")...)...)
	if code := w0.wait(t, 2*time.Minute); code == 0 {
		t.Fatalf("chief exited 0 without worker 1")
	}
	if took := time.Since(begun); took > 18*time.Second {
		t.Errorf("chief took %s to exit, want within --startup_timeout + 10s", took.Round(time.Second))
	}
	if out := w0.output(); !strings.Contains(out, "never heard from workers [1]") {
		t.Errorf("chief's output does not name worker 1")
	}
	for _, p := range pss {
		if code := p.wait(t, time.Minute); code == 0 {
			t.Errorf("%s exited 0 though worker 1 never came", p.name)
		}
		if out := p.output(); !strings.Contains(out, "never heard from workers [1]") {
			t.Errorf("%s does not name worker 1", p.name)
		}
	}
}

// With --replicas, a ps started again rejoins as a backup of its shards:
// it hears the workers' calls only through what their primaries log of
// them (synchronous pushes are held at the primary, and the backups apply
// the step's aggregate). It must not take the workers training on for
// workers never heard from: past --startup_timeout it still serves, and
// the job goes on.
func TestRejoinedPSHearsOfTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	hosts := freeHosts(t, 3+2+6)
	ps, workers, repl := hosts[:3], hosts[3:5], hosts[5:] // 3 ps: one lost leaves a majority
	const startup = 4 * time.Second
	flags := []string{"--replicas=2", "--replica_hosts=" + strings.Join(repl, ","), "--sync_replicas",
		"--startup_timeout=" + startup.String(), "--recovery_timeout=2m"}
	var pss []*proc
	for i := range ps {
		pss = append(pss, start(t, fmt.Sprintf("ps%d", i), nil, append(clusterArgs(ps, workers, "ps", i), flags...)...))
	}
	p1 := pss[1]
	for i := range workers {
		start(t, fmt.Sprintf("worker%d", i), nil, append(clusterArgs(ps, workers, "worker", i), append(flags, "--model=linreg", "--train_steps=1000000000")...)...)
	}
	psStepAtLeast(t, ps[0], 100, time.Minute)
	if err := p1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p1.wait(t, time.Minute)
	p1 = start(t, "ps1-again", nil, append(clusterArgs(ps, workers, "ps", 1), flags...)...)
	p1.waitCount(t, "re-replicated shard", 2, time.Minute)
	time.Sleep(startup + 3*time.Second)
	select {
	case <-p1.done:
		t.Fatalf("the rejoined ps exited while the workers trained on")
	default:
	}
	if out := p1.output() + pss[0].output() + pss[2].output(); strings.Contains(out, "gave up") {
		t.Errorf("a ps took workers that train for workers never heard from")
	}
	psStepAtLeast(t, ps[0], 200, time.Minute) // the job goes on
}
