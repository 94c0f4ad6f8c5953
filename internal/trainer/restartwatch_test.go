package trainer

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// A ps that dies just after completing a synchronous step, whose answer to
// one worker was lost, while that worker's push to the other ps was never
// sent (its call failed first): the chief's next step waits on the live ps
// for that gradient, and the worker waits, in recovery, for the chief to
// roll the cluster back. The chief learns from the ps's new incarnation,
// while its step waits, that the ps restarted: it rolls the cluster back
// and the job ends. (TestScenarios/ps_restart.txt hung so, once in dozens
// of runs under load.) Here worker 1 is first a client of the test's,
// whose pushes reach ps 0 through a proxy that is cut before its push of
// step `lost`.
func TestSyncStepWaitingOnALivePSSeesARestart(t *testing.T) {
	const lost = 25
	dir := t.TempDir()
	cl := newTestCluster(t, 2, 2, Config{
		Config:     lifecycle.Config{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.05}, Sync: true, CheckpointDir: filepath.Join(dir, "ckpt"), SaveSteps: 10, WaitLogEvery: 100 * time.Millisecond, RecoveryTimeout: time.Minute, StartupTimeout: time.Minute},
		Model:      "linreg",
		Data:       model.Config{BatchSize: 10, Seed: 3},
		TrainSteps: 200,
		ResultFile: filepath.Join(dir, "r.json"),
	})
	cl.startPS(0)
	cl.startPS(1)
	// A guard against a hang (the bug), not a bound on speed.
	ctx := withDeadline(t, 2*time.Minute)
	chief := make(chan error, 1)
	go func() { chief <- RunWorker(ctx, cl.config("worker", 0)) }()

	m, err := catalog.New("linreg", model.Config{Worker: 1, NumWorkers: 2, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, cl.spec.PS[0])
	w1, err := client.New([]string{proxy.ln.Addr().String(), cl.spec.PS[1]}, m.Variables(), client.Options{Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	if _, err := w1.WaitReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	params, grads := model.NewParams(m.Variables()), model.NewParams(m.Variables())
	for step := int64(0); step < lost; {
		if step, _, err = w1.PushPull(ctx, step, grads, step+1, params); err != nil {
			t.Fatalf("worker 1 (the test's client) at step %d: %v", step, err)
		}
	}
	proxy.cut()
	pctx, cancelPush := context.WithCancel(ctx)
	lostPush := w1.PushPullAsync(pctx, lost, grads, lost+1, params) // reaches ps 1 only
	status, err := client.New(cl.spec.PS, m.Variables(), client.Options{Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	for {
		st, err := status.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st[1].GlobalStep > lost {
			break // ps 1 completed step `lost`; ps 0 waits for worker 1's gradient
		}
		select {
		case err := <-chief:
			t.Fatalf("the chief ended before the kill: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cl.kill(1)
	cl.startPS(1) // restores the checkpoint of step 20
	cancelPush()
	<-lostPush.Done

	w1err := make(chan error, 1)
	go func() { w1err <- RunWorker(ctx, cl.config("worker", 1)) }()
	for i, errc := range []chan error{chief, w1err} {
		if err := <-errc; err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("worker %d: %v: the job hung after ps 1 restarted", i, err)
			}
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if cl.log.count("chief: ps [1] restarted from the checkpoint of step 20") != 1 {
		t.Errorf("the chief did not roll the cluster back to ps 1's checkpoint once")
	}
	if r := readResultFile(t, filepath.Join(dir, "r.json")); r.GlobalStep != 200 {
		t.Errorf("global step %d, want 200", r.GlobalStep)
	}
}
