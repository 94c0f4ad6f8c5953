package session

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// startPS serves numPS in-process ps on loopback for workers workers and
// returns their addresses.
func startPS(t *testing.T, numPS, workers int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, numPS)
	var addrs []string
	for i := range numPS {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		s := server.New(server.Config{Task: i, NumPS: numPS, NumWorkers: workers, WaitForever: true})
		go func() { server.ServeListener(ctx, lis, s); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range numPS {
			<-done
		}
	})
	return addrs
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Minute, errHung)
	t.Cleanup(cancel)
	return ctx
}

var errHung = &hungError{}

type hungError struct{}

func (*hungError) Error() string { return "test hung: no answer from the ps within a minute" }

func TestSyncOneWorkerAppliesSGD(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 2, 1)
	vars := []model.Variable{{Name: "w", Shape: []int{2, 3}}, {Name: "b", Shape: []int{3}}}
	cfg := Config{
		Config: lifecycle.Config{
			Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5},
			Sync:      true,
		},
		Variables: vars,
	}
	init := model.Params{"w": {1, 2, 3, 4, 5, 6}, "b": {-1, 0, 1}}
	s, err := Start(ctx, cfg, init)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := model.NewParams(vars)
	if step, err := s.Pull(ctx, params); err != nil || step != 0 {
		t.Fatalf("Pull: step %d, %v; want step 0", step, err)
	}
	if !slices.Equal(params["w"], init["w"]) || !slices.Equal(params["b"], init["b"]) {
		t.Fatalf("pulled %v, want the initial values %v", params, init)
	}
	grads := model.Params{"w": {2, 2, 2, 4, 4, 4}, "b": {1, -1, 0.5}}
	want := model.NewParams(vars)
	for _, v := range vars {
		for i := range want[v.Name] {
			want[v.Name][i] = init[v.Name][i] - 0.5*grads[v.Name][i]
		}
	}
	for round := 1; round <= 2; round++ {
		step, err := s.PushPull(ctx, grads, params)
		if err != nil || step != int64(round) || s.Step() != int64(round) {
			t.Fatalf("PushPull %d: step %d (Step() %d), %v; want step %d", round, step, s.Step(), err, round)
		}
		for _, v := range vars {
			if !slices.Equal(params[v.Name], want[v.Name]) {
				t.Fatalf("after step %d, %s = %v, want %v (w - 0.5·g)", round, v.Name, params[v.Name], want[v.Name])
			}
			for i := range want[v.Name] {
				want[v.Name][i] -= 0.5 * grads[v.Name][i]
			}
		}
	}
	if err := s.Done(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSparseRowsRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 2, 1)
	vars := []model.Variable{{Name: "b", Shape: []int{1}}}
	cfg := Config{
		Config: lifecycle.Config{
			Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
		},
		Variables: vars,
		Tables:    []model.Table{{Name: "emb", Dim: 2}},
	}
	s, err := Start(ctx, cfg, model.Params{"b": {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := []uint64{7, 1 << 40, 3, 12345678901}
	out := make([]float32, 2*len(keys))
	if err := s.PullRows(ctx, "emb", keys, out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out, make([]float32, len(out))) {
		t.Fatalf("new rows of a zeros table: %v, want zeros", out)
	}
	grads := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	if err := s.PushRows(ctx, "emb", keys, grads); err != nil {
		t.Fatal(err)
	}
	if err := s.PullRows(ctx, "emb", keys, out); err != nil {
		t.Fatal(err)
	}
	for i, g := range grads {
		if out[i] != -g {
			t.Fatalf("after a push of %v with sgd lr 1, rows %v; want their negation", grads, out)
		}
	}
	if err := s.PullRows(ctx, "nope", keys, out); err == nil {
		t.Fatal("pulling rows of an undeclared table: no error")
	}
}

func TestStartRefusesShortInit(t *testing.T) {
	cfg := Config{
		Config: lifecycle.Config{
			Cluster: cluster.Config{Spec: cluster.Spec{PS: []string{"127.0.0.1:1"}, Workers: []string{"127.0.0.1:2"}}, Task: cluster.Task{Job: cluster.JobWorker}},
		},
		Variables: []model.Variable{{Name: "w", Shape: []int{4}}},
	}
	_, err := Start(context.Background(), cfg, model.Params{"w": {1}})
	if err == nil {
		t.Fatal("Start with 1 initial value for a variable of 4: no error")
	}
	t.Log(err)
}

// Rows pushed with the dense gradients are one push: in sync mode with one
// worker both are applied at step 1 (a PushRows of their own would have
// been the worker's push of that step, and the dense push dropped).
func TestPushPullRowsIsOnePush(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 2, 1)
	vars := []model.Variable{{Name: "b", Shape: []int{2}}}
	cfg := Config{
		Config: lifecycle.Config{
			Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
			Sync:      true,
		},
		Variables: vars,
		Tables:    []model.Table{{Name: "emb", Dim: 1}},
	}
	s, err := Start(ctx, cfg, model.Params{"b": {1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := model.NewParams(vars)
	keys := []uint64{4, 40}
	step, err := s.PushPullRows(ctx, model.Params{"b": {1, 2}}, params, []Rows{{Table: "emb", Keys: keys, Values: []float32{3, 5}}})
	if err != nil || step != 1 {
		t.Fatalf("PushPullRows: step %d, %v; want step 1", step, err)
	}
	if !slices.Equal(params["b"], []float32{0, -1}) {
		t.Fatalf("b = %v after the push, want [0 -1]", params["b"])
	}
	out := make([]float32, 2)
	if err := s.PullRows(ctx, "emb", keys, out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out, []float32{-3, -5}) {
		t.Fatalf("rows %v after the push, want [-3 -5]", out)
	}

	// A table twice in one push (an asynchronous ps would apply it as two
	// updates) is refused before anything is sent.
	twice := []Rows{{Table: "emb", Keys: keys[:1], Values: []float32{1}}, {Table: "emb", Keys: keys[1:], Values: []float32{1}}}
	if step, err := s.PushPullRows(ctx, model.Params{"b": {1, 2}}, params, twice); err == nil || !strings.Contains(err.Error(), `table "emb" twice in one push`) || step != 1 {
		t.Fatalf("a table twice: step %d, %v; want step 1 and an error naming table \"emb\" twice", step, err)
	}
	if err := s.PullRows(ctx, "emb", keys, out); err != nil || !slices.Equal(out, []float32{-3, -5}) {
		t.Fatalf("rows %v (%v) after the refused push, want [-3 -5]: nothing applied", out, err)
	}
}

// A pull made aside (a read-ahead) while the program computes does not cut
// the step's compute time where it returns, as a pull the program waited
// for does.
func TestPullRowsAsideKeepsComputeTime(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 1, 1)
	for _, aside := range []bool{true, false} {
		cfg := Config{
			Config: lifecycle.Config{
				Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
				Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
			},
			Variables:   []model.Variable{{Name: "b", Shape: []int{1}}},
			Tables:      []model.Table{{Name: "emb", Dim: 2}},
			MetricsAddr: "127.0.0.1:0",
		}
		s, err := Start(ctx, cfg, model.Params{"b": {0}})
		if err != nil {
			t.Fatal(err)
		}
		params := model.Params{"b": {0}}
		if _, err := s.PushPull(ctx, model.Params{"b": {1}}, params); err != nil {
			t.Fatal(err)
		}
		const work = 400 * time.Millisecond
		begun := time.Now()
		time.Sleep(work / 4) // the program computes; a quarter in, a pull
		pull := s.PullRows
		if aside {
			pull = s.PullRowsAside
		}
		if err := pull(ctx, "emb", []uint64{1}, make([]float32, 2)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(begun.Add(work)))
		if _, err := s.PushPull(ctx, model.Params{"b": {1}}, params); err != nil {
			t.Fatal(err)
		}
		// The first step's compute is the moment between Start and its
		// push; the second's is work, or what the pull left of it.
		got := scrapeSum(t, s.MetricsAddr(), "paramserv_worker_compute_seconds_sum")
		s.Close()
		if aside && got < work.Seconds() {
			t.Errorf("compute seconds %.3f with a pull aside, want at least the %v the program computed", got, work)
		}
		if !aside && got >= work.Seconds() {
			t.Errorf("compute seconds %.3f with a pull the program waited for, want less than %v: the pull did not cut the compute time", got, work)
		}
	}
}

// scrapeSum reads a metric's value from a worker's /metrics.
func scrapeSum(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in the worker's metrics:\n%s", name, body)
	return 0
}

// A synchronous push that waits for the other workers says so every
// WaitLogEvery, where it waited in silence before.
func TestSyncPushLogsItsWait(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 1, 2)
	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	logs := make(chan string, 100)
	cfg := func(i int) Config {
		return Config{
			Config: lifecycle.Config{
				Cluster: cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1", "127.0.0.1:2"}},
					Task: cluster.Task{Job: cluster.JobWorker, Index: i}},
				Optimizer:    optim.Config{Name: "sgd", LearningRate: 1},
				Sync:         true,
				WaitLogEvery: 20 * time.Millisecond,
				Logf:         func(f string, a ...any) { logs <- fmt.Sprintf(f, a...) },
			},
			Variables: vars,
		}
	}
	chief, err := Start(ctx, cfg(0), model.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer chief.Close()
	other, err := Start(ctx, cfg(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pushed := make(chan error, 1)
	go func() {
		_, err := chief.PushPull(ctx, model.Params{"w": {1, 1}}, model.NewParams(vars))
		pushed <- err
	}()
	want := "worker 0: push of step 0 has waited"
	for line := ""; !strings.Contains(line, want); {
		select {
		case line = <-logs:
		case <-ctx.Done():
			t.Fatalf("no log line %q while the chief waited for worker 1's push", want)
		}
		if strings.Contains(line, want) && !strings.Contains(line, "step 1 completes when 2 of the 2 workers have pushed") {
			t.Errorf("log line %q: want it to say the step completes when 2 of the 2 workers have pushed", line)
		}
	}
	if _, err := other.PushPull(ctx, model.Params{"w": {1, 1}}, model.NewParams(vars)); err != nil {
		t.Fatal(err)
	}
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
}

// A NaN or Inf in the gradients of a variable or a row held by one ps is
// refused whole: before, that ps refused its part and the other applied
// its own, leaving the model half updated at two steps.
func TestNonFiniteGradientIsRefusedWhole(t *testing.T) {
	ctx := testCtx(t)
	addrs := startPS(t, 2, 1)
	vars := []model.Variable{{Name: "a", Shape: []int{2}}, {Name: "b", Shape: []int{2}}, {Name: "c", Shape: []int{2}}, {Name: "d", Shape: []int{2}}}
	cfg := Config{
		Config: lifecycle.Config{
			Cluster:   cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer: optim.Config{Name: "sgd", LearningRate: 1},
		},
		Variables: vars,
		Tables:    []model.Table{{Name: "t", Dim: 2}},
	}
	s, err := Start(ctx, cfg, model.Params{"a": {0, 0}, "b": {0, 0}, "c": {0, 0}, "d": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nan, inf := float32(math.NaN()), float32(math.Inf(-1))
	keys := []uint64{1, 2, 3, 4, 5, 6, 7, 8} // on both ps
	ones := func() []float32 { return slices.Repeat([]float32{1}, 2*len(keys)) }
	for _, bad := range []string{"a", "b", "c", "d", "row"} {
		g := model.Params{"a": {1, 1}, "b": {1, 1}, "c": {1, 1}, "d": {1, 1}}
		rows := []Rows{{Table: "t", Keys: keys, Values: ones()}}
		want := `variable "` + bad + `": gradient element 1 is -Inf`
		if bad == "row" {
			rows[0].Values[5] = nan
			want = `table "t": gradient of key 3 element 1 is NaN`
		} else {
			g[bad][1] = inf
		}
		_, err := s.PushPullRows(ctx, g, model.NewParams(vars), rows)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a non-finite gradient in %s: %v, want an error saying %q", bad, err, want)
		}
		p := model.NewParams(vars)
		step, err := s.Pull(ctx, p)
		out := make([]float32, 2*len(keys))
		if err == nil {
			err = s.PullRows(ctx, "t", keys, out)
		}
		if err != nil || step != 0 || slices.ContainsFunc(slices.Concat(p["a"], p["b"], p["c"], p["d"], out), func(x float32) bool { return x != 0 }) {
			t.Errorf("after the refused push (%s): step %d, values %v, rows %v, %v; want step 0, all zero", bad, step, p, out, err)
		}
	}
	if err := s.PushRows(ctx, "t", keys[:1], []float32{0, inf}); err == nil || !strings.Contains(err.Error(), "is -Inf") {
		t.Errorf("PushRows of an Inf: %v, want it refused", err)
	}
}

// A ps that does not come back: the error says so once, where the cause
// and "recovery after" were written twice, by the trainer and again here.
func TestRecoveryGivenUpSaysItOnce(t *testing.T) {
	ctx := testCtx(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	psCtx, stopPS := context.WithCancel(ctx)
	psDone := make(chan struct{})
	go func() {
		server.ServeListener(psCtx, lis, server.New(server.Config{NumPS: 1, NumWorkers: 1, WaitForever: true}))
		close(psDone)
	}()
	defer func() { stopPS(); <-psDone }()
	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	s, err := Start(ctx, Config{
		Config: lifecycle.Config{
			Cluster:         cluster.Config{Spec: cluster.Spec{PS: []string{lis.Addr().String()}, Workers: []string{"127.0.0.1:1"}}, Task: cluster.Task{Job: cluster.JobWorker}},
			Optimizer:       optim.Config{Name: "sgd", LearningRate: 1},
			RecoveryTimeout: 300 * time.Millisecond,
		},
		Variables: vars,
	}, model.Params{"w": {0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stopPS()
	<-psDone
	_, err = s.PushPull(ctx, model.Params{"w": {1, 1}}, model.NewParams(vars))
	if err == nil || strings.Count(err.Error(), "recovery after") != 1 || !strings.Contains(err.Error(), "recovery_timeout") {
		t.Errorf("PushPull with the ps gone: %v, want one \"recovery after\" and the timeout named", err)
	}
}

// PushPullTables reads the rows it is given after its push is applied, in
// one request: asynchronously at once, the pushed rows' new values among
// them; in sync mode once the step has completed, with the other worker's
// rows of that step (pushed after the chief's request was waiting).
func TestPushPullTablesReadsAfterThePush(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(modeName(sync), func(t *testing.T) {
			ctx := testCtx(t)
			workers := 1
			if sync {
				workers = 2
			}
			addrs := startPS(t, 2, workers)
			vars := []model.Variable{{Name: "b", Shape: []int{2}}}
			logs := make(chan string, 100)
			cfg := func(i int) Config {
				c := Config{
					Config: lifecycle.Config{
						Cluster: cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1", "127.0.0.1:2"}[:workers]},
							Task: cluster.Task{Job: cluster.JobWorker, Index: i}},
						Optimizer:    optim.Config{Name: "sgd", LearningRate: 1},
						Sync:         sync,
						WaitLogEvery: 20 * time.Millisecond,
						Logf: func(f string, a ...any) {
							select {
							case logs <- fmt.Sprintf(f, a...):
							default:
							}
						},
					},
					Variables: vars,
					Tables:    []model.Table{{Name: "emb", Dim: 2}, {Name: "bias", Dim: 1}},
				}
				return c
			}
			chief, err := Start(ctx, cfg(0), model.Params{"b": {1, 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer chief.Close()
			params := model.NewParams(vars)
			keys := []uint64{4, 40, 1 << 50}
			emb := make([]float32, 2*len(keys))
			bias := make([]float32, 2)
			pull := []Rows{{Table: "emb", Keys: keys, Values: emb}, {Table: "bias", Keys: []uint64{9, 10}, Values: bias}}
			push := []Rows{{Table: "emb", Keys: keys[:1], Values: []float32{3, 5}}}
			type result struct {
				step int64
				err  error
			}
			done := make(chan result, 1)
			go func() {
				step, err := chief.PushPullTables(ctx, model.Params{"b": {1, 2}}, params, push, pull)
				done <- result{step, err}
			}()
			if sync {
				other, err := Start(ctx, cfg(1), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				for line := ""; !strings.Contains(line, "worker 0: push of step 0 has waited"); {
					select {
					case line = <-logs:
					case <-ctx.Done():
						t.Fatal("the chief's push did not wait for worker 1's")
					}
				}
				if _, err := other.PushPullRows(ctx, model.Params{"b": {0, 0}}, model.NewParams(vars),
					[]Rows{{Table: "emb", Keys: keys[1:2], Values: []float32{7, 11}}, {Table: "bias", Keys: []uint64{10}, Values: []float32{2}}}); err != nil {
					t.Fatal(err)
				}
			}
			r := <-done
			if r.err != nil || r.step != 1 {
				t.Fatalf("PushPullTables: step %d, %v; want step 1", r.step, r.err)
			}
			wantEmb := make([]float32, len(emb))
			if err := chief.PullRows(ctx, "emb", keys, wantEmb); err != nil {
				t.Fatal(err)
			}
			wantBias := make([]float32, len(bias))
			if err := chief.PullRows(ctx, "bias", []uint64{9, 10}, wantBias); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(emb, wantEmb) || !slices.Equal(bias, wantBias) {
				t.Fatalf("rows pulled with the push: emb %v bias %v; a PullRows after it reads emb %v bias %v", emb, bias, wantEmb, wantBias)
			}
			if emb[0] == 0 || emb[1] == 0 {
				t.Fatalf("emb row 4 %v: want the pushed gradients applied", emb[:2])
			}
			if sync && (emb[2] == 0 || bias[1] == 0) {
				t.Fatalf("emb row 40 %v, bias row 10 %v: want worker 1's gradients of the step applied", emb[2:4], bias[1])
			}
			if !sync && !slices.Equal(emb[:2], []float32{-3, -5}) {
				t.Fatalf("emb row 4 %v, want [-3 -5] (sgd lr 1)", emb[:2])
			}

			// A table twice in the pull is refused before anything is sent.
			twice := []Rows{{Table: "emb", Keys: keys[:1], Values: emb[:2]}, {Table: "emb", Keys: keys[1:2], Values: emb[2:4]}}
			if step, err := chief.PushPullTables(ctx, model.Params{"b": {1, 2}}, params, nil, twice); err == nil || !strings.Contains(err.Error(), `table "emb" twice in one pull`) || step != 1 {
				t.Fatalf("a table twice: step %d, %v; want step 1 and an error naming table \"emb\" twice", step, err)
			}
		})
	}
}

// SendPushPullTables and Land, a push+pull in two halves, give what
// PushPullTables gives, step by step, on twin clusters: the values, the
// rows read after the push and the steps; a refused request fails in Land
// with nothing sent.
func TestSendPushPullTablesGivesPushPullTables(t *testing.T) {
	ctx := testCtx(t)
	vars := []model.Variable{{Name: "b", Shape: []int{3}}}
	start := func() *Session {
		addrs := startPS(t, 2, 1)
		s, err := Start(ctx, Config{
			Config: lifecycle.Config{
				Cluster: cluster.Config{Spec: cluster.Spec{PS: addrs, Workers: []string{"127.0.0.1:1"}},
					Task: cluster.Task{Job: cluster.JobWorker, Index: 0}},
				Optimizer: optim.Config{Name: "adagrad", LearningRate: 0.5},
				Logf:      func(string, ...any) {},
			},
			Variables: vars,
			Tables:    []model.Table{{Name: "emb", Dim: 2}},
		}, model.Params{"b": {1, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	plain, split := start(), start()
	keys := []uint64{4, 40, 1 << 50, 7}
	for i := range 5 {
		grads := model.Params{"b": {float32(i), 1, -2}}
		push := []Rows{{Table: "emb", Keys: keys[i%2 : i%2+3], Values: []float32{1, float32(i), 2, 3, -1, 0.5}}}
		var got, want [2]model.Params
		var rows [2][]float32
		var steps [2]int64
		for j, s := range []*Session{plain, split} {
			got[j] = model.NewParams(vars)
			rows[j] = make([]float32, 2*len(keys))
			pull := []Rows{{Table: "emb", Keys: keys, Values: rows[j]}}
			var err error
			if j == 0 {
				steps[j], err = s.PushPullTables(ctx, grads, got[j], push, pull)
			} else {
				steps[j], err = s.SendPushPullTables(ctx, grads, got[j], push, pull).Land()
			}
			if err != nil {
				t.Fatal(err)
			}
			want[j] = got[j]
		}
		if steps[0] != steps[1] || steps[1] != int64(i+1) || !slices.Equal(want[0]["b"], want[1]["b"]) || !slices.Equal(rows[0], rows[1]) {
			t.Fatalf("step %d: PushPullTables gave step %d, b %v, rows %v; SendPushPullTables gave step %d, b %v, rows %v",
				i, steps[0], want[0]["b"], rows[0], steps[1], want[1]["b"], rows[1])
		}
	}
	twice := []Rows{{Table: "emb", Keys: keys[:1], Values: make([]float32, 2)}, {Table: "emb", Keys: keys[1:2], Values: make([]float32, 2)}}
	if step, err := split.SendPushPullTables(ctx, model.Params{"b": {1, 1, 1}}, model.NewParams(vars), nil, twice).Land(); err == nil ||
		!strings.Contains(err.Error(), `table "emb" twice in one pull`) || step != 5 {
		t.Fatalf("a table twice: step %d, %v; want step 5 and an error naming table \"emb\" twice", step, err)
	}
}
