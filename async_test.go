package paramserv_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
)

// testCtx is a context that ends with the test, or after a minute,
// failing the test then: a call that hangs ends with it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	deadline := time.AfterFunc(time.Minute, func() { cancel(); t.Error("the calls did not end within a minute") })
	t.Cleanup(func() { deadline.Stop(); cancel() })
	return ctx
}

// servePS serves the ps of a job of one ps and one worker on a loopback
// port until ctx ends, configured by cfg (whose TFConfig and Listen it
// sets). It returns the worker's TF_CONFIG and the channel ServePS's
// result comes on.
func servePS(t *testing.T, ctx context.Context, cfg paramserv.PSConfig) (workerTFConfig string, psDone <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	cfg.TFConfig = `{` + cluster + `,"task":{"type":"ps","index":0}}`
	cfg.Listen = func(string) (net.Listener, error) { return lis, nil }
	done := make(chan error, 1)
	go func() { done <- paramserv.ServePS(ctx, cfg) }()
	return `{` + cluster + `,"task":{"type":"worker","index":0}}`, done
}

// startOne starts a ps on a loopback port and the chief of a one-worker
// job with variable w (2 values, starting at 0), the tables given, and SGD
// at rate 1, so a push of gradient g moves a value by -g.
func startOne(t *testing.T, ctx context.Context, tables ...paramserv.Table) *paramserv.Worker {
	t.Helper()
	tf, _ := servePS(t, ctx, paramserv.PSConfig{})
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  tf,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{2}}},
		Tables:    tables,
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1},
	}, paramserv.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// Async calls started together run one after another in the order they
// were started, each delivering its own step and values to Wait, whatever
// order they are waited in; a call's error comes through its Wait, applies
// nothing, and does not stop the calls after it; the blocking methods wait
// for the calls in flight.
func TestAsyncCallsOverlapInOrder(t *testing.T) {
	ctx := testCtx(t)
	w := startOne(t, ctx)

	g := paramserv.Params{"w": {1, 2}}
	p1, p2, p3 := w.NewParams(), w.NewParams(), w.NewParams()
	c1 := w.PushPullAsync(ctx, g, p1)
	c2 := w.PushPullAsync(ctx, g, p2)
	c3 := w.PullAsync(ctx, p3)
	for _, tc := range []struct {
		name string
		c    *paramserv.Call
		p    paramserv.Params
		step int64
		want []float32
	}{
		{"pull started third", c3, p3, 2, []float32{-2, -4}},
		{"push+pull started first", c1, p1, 1, []float32{-1, -2}},
		{"push+pull started second", c2, p2, 2, []float32{-2, -4}},
	} {
		step, err := tc.c.Wait()
		if err != nil || step != tc.step || !slices.Equal(tc.p["w"], tc.want) {
			t.Errorf("%s: step %d, w %v, err %v; want step %d, w %v", tc.name, step, tc.p["w"], err, tc.step, tc.want)
		}
		select {
		case <-tc.c.Done():
		default:
			t.Errorf("%s: Done not closed after Wait returned", tc.name)
		}
	}

	bad := w.PushPullAsync(ctx, paramserv.Params{"w": {1}}, p1) // one value for a variable of two
	after := w.PullAsync(ctx, p2)
	if _, err := bad.Wait(); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("a gradient of the wrong length: Wait says %v, want an error naming variable \"w\"", err)
	}
	if step, err := after.Wait(); err != nil || step != 2 || !slices.Equal(p2["w"], []float32{-2, -4}) {
		t.Errorf("the pull after a failed call: step %d, w %v, err %v; want step 2, w [-2 -4] (nothing applied)", step, p2["w"], err)
	}

	w.PushPullAsync(ctx, g, p1)
	if step := w.Step(); step != 3 {
		t.Errorf("Step with a push in flight: %d, want 3 (it waits for the push)", step)
	}
	if _, err := w.Pull(ctx, p3); err != nil || !slices.Equal(p3["w"], []float32{-3, -6}) {
		t.Errorf("Pull after the calls: w %v, err %v; want [-3 -6]", p3["w"], err)
	}
}
