package trainer

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// jobEnd: a ps ends the job when every worker is done, gave up or, the
// goal reached, gone; it waits for a worker that may still come back.
func TestJobEnd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0.Add(time.Minute)
	recent, old := now.Add(-time.Second), now.Add(-goneAfter)
	gave := map[int]server.GaveUp{0: {Why: "--recovery_timeout=5s passed", At: recent}, 1: {Why: "ps 1 gone", At: recent}}
	for _, tc := range []struct {
		name      string
		done      []int
		seen      map[int]time.Time
		gaveUp    map[int]server.GaveUp
		over      bool
		final     bool
		started   time.Time
		ended, ok bool
		how       string
	}{
		{name: "both gave up", seen: map[int]time.Time{0: recent, 1: recent}, gaveUp: gave, started: t0,
			ended: true, how: "worker 0 gave up (--recovery_timeout=5s passed), worker 1 gave up (ps 1 gone)"},
		{name: "one gave up, one training", seen: map[int]time.Time{0: recent, 1: recent}, gaveUp: map[int]server.GaveUp{1: gave[1]}, started: t0},
		{name: "gave up, then back", seen: map[int]time.Time{0: recent.Add(time.Millisecond), 1: recent}, gaveUp: gave, started: t0},
		{name: "silent before the goal", done: []int{0}, seen: map[int]time.Time{0: recent, 1: old}, started: t0},
		{name: "gone after the goal", done: []int{0}, seen: map[int]time.Time{0: recent, 1: old}, over: true, started: t0,
			ended: true, ok: true, how: "worker 0 done, worker 1 gone after the goal (last heard 5s ago)"},
		{name: "chief gone after the goal", done: []int{1}, seen: map[int]time.Time{0: old, 1: recent}, over: true, started: t0,
			ended: true, how: "worker 0 gone after the goal (last heard 5s ago), worker 1 done"},
		{name: "lingering worker heard", done: []int{0}, seen: map[int]time.Time{0: recent, 1: recent}, over: true, started: t0},
		{name: "restored final, nobody yet", over: true, final: true, started: now.Add(-time.Second)},
		{name: "restored final, nobody came", over: true, final: true, started: now.Add(-5 * time.Minute),
			ended: true, ok: true, how: "worker 0 never heard from (the job was over), worker 1 never heard from (the job was over)"},
	} {
		ended, ok, how := jobEnd(2, tc.done, tc.seen, tc.gaveUp, tc.over, tc.final, tc.started, now, 5*time.Minute)
		if ended != tc.ended || ok != tc.ok || (tc.ended && how != tc.how) {
			t.Errorf("%s: ended %v ok %v %q; want %v %v %q", tc.name, ended, ok, how, tc.ended, tc.ok, tc.how)
		}
		if ended && !strings.Contains(how, "worker 1") {
			t.Errorf("%s: %q does not name every worker", tc.name, how)
		}
	}
}

// A ps started again on the job's final checkpoint does not give up on a
// worker never heard from after --startup_timeout while another worker is
// still there (heard, not yet done): the job was over, so the one never
// heard from counts as ended, and once the other is done the ps exits 0
// naming both. Before, it gave up (exit 1) on the first.
func TestRestoredFinalPSWaitsForAWorkerStillThere(t *testing.T) {
	dir := t.TempDir()
	cl := newTestCluster(t, 1, 2, Config{
		Config: lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.05}, CheckpointDir: dir,
			WaitLogEvery: 50 * time.Millisecond, StartupTimeout: 500 * time.Millisecond},
		Model: "linreg", Data: model.Config{BatchSize: 10, Seed: 3}, TrainSteps: 50,
	})
	ps := cl.startPS(0)
	ctx := withDeadline(t, time.Minute)
	for i, err := range cl.runWorkers(ctx) {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	select {
	case <-ps.done:
		if ps.err != nil {
			t.Fatalf("first ps: %v", ps.err)
		}
	case <-ctx.Done():
		t.Fatal("the first ps did not exit")
	}

	ps = cl.startPS(0)
	m, err := catalog.New("linreg", model.Config{Worker: 1, NumWorkers: 2, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cl.spec.PS, m.Variables(), client.Options{Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for { // until the ps serves
		if _, err := c.Status(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Worker 1 polls for six startup timeouts: the ps must not give up.
	for range 30 {
		if _, err := c.Status(ctx); err != nil {
			t.Fatalf("worker 1's Status: %v (the ps gave up?)", err)
		}
		select {
		case <-ps.done:
			t.Fatalf("the ps exited (%v) while worker 1 was still there", ps.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := c.Done(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ps.done:
		if ps.err != nil {
			t.Fatalf("RunPS: %v, want nil", ps.err)
		}
	case <-ctx.Done():
		t.Fatal("the ps did not exit once worker 1 was done")
	}
	if cl.log.count("worker 0 never heard from (the job was over), worker 1 done") == 0 {
		t.Error("the ps did not say how each worker ended")
	}
}

// The chief's wait at the goal for a ps that stopped moving follows the
// job's settings, and says which.
func TestGoalStall(t *testing.T) {
	var async, sync, syncForever, replicated Config
	sync.Sync, sync.SyncTimeout = true, time.Minute
	syncForever.Sync, syncForever.RecoveryTimeout = true, 5*time.Minute
	replicated.Replication = Replication{Replicas: 2, FailoverTimeout: 30 * time.Second}
	for _, tc := range []struct {
		name string
		cfg  Config
		want time.Duration
		flag string
	}{
		{"async", async, goalStallMin, "asynchronous push in flight"},
		{"sync", sync, time.Minute + goalStallMin, "--sync_timeout=1m0s"},
		{"sync without a timeout", syncForever, 5 * time.Minute, "--recovery_timeout=5m0s"},
		{"replicated", replicated, time.Minute, "--failover_timeout=30s"},
	} {
		got, why := goalStall(tc.cfg)
		if got != tc.want || !strings.Contains(why, tc.flag) {
			t.Errorf("%s: %s (%s), want %s naming %s", tc.name, got, why, tc.want, tc.flag)
		}
	}
}

// slowEvalModel is a model whose chief's final evaluation first holds
// the ps's lock until hold returns, as a long pull of a table on disk
// does (docs/TIERS.md: 262,144 keys a pull).
type slowEvalModel struct {
	model.Model
	hold func()
}

func (m *slowEvalModel) Evaluate(p model.Params) (map[string]float64, error) {
	if m.hold != nil {
		m.hold()
	}
	return m.Model.Evaluate(p)
}

// A worker at the goal waiting for the chief's final checkpoint keeps
// waiting while the chief's final evaluation holds the ps up past the
// deadline of the worker's Status calls: the ps is slow, not gone, and the
// worker logs what it waits for. Before, the Status call's DeadlineExceeded
// failed worker 1 (seen on a tiered job without --test_data, whose
// evaluation pulls the whole table from disk).
func TestWorkerWaitsForAChiefWhoseEvaluationHoldsThePS(t *testing.T) {
	const slow = "waiting for a ps to answer (none in"
	var srv atomic.Pointer[server.Server]
	cl := newTestCluster(t, 1, 2, Config{
		Config: lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.05}, CheckpointDir: t.TempDir(),
			WaitLogEvery: time.Millisecond},
		Model: "linreg", Data: model.Config{BatchSize: 10, Seed: 3}, TrainSteps: 50,
		statusWait: 20 * time.Millisecond,
	})
	cl.psSet = func(p *PSConfig) { p.OnServe = func(s *server.Server) { srv.Store(s) } }
	worker1Done := make(chan struct{})
	var once sync.Once
	cl.base.NewModel = func(c model.Config) (model.Model, error) {
		m, err := catalog.New("linreg", c)
		if err != nil || c.Worker != 0 {
			return m, err
		}
		return &slowEvalModel{Model: m, hold: func() {
			once.Do(func() {
				// Worker 1 waits for the final checkpoint first (its
				// push would wait on the lock for ever otherwise).
				for cl.log.count("worker 1: at the goal; waiting for the chief") == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				mu := srv.Load().Lock()
				mu.Lock()
				defer mu.Unlock()
				for cl.log.count(slow) < 3 {
					select {
					case <-worker1Done:
						return // it failed: the test says so
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
		}}, nil
	}
	cl.startPS(0)
	ctx := withDeadline(t, time.Minute)
	var errs [2]error
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = RunWorker(ctx, cl.config("worker", 0)) })
	wg.Go(func() { errs[1] = RunWorker(ctx, cl.config("worker", 1)); close(worker1Done) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	if n := cl.log.count("[worker1] worker 1: at the goal; " + slow); n < 3 {
		t.Errorf("worker 1 logged %q %d times, want 3 or more", slow, n)
	}
}
