package paramserv_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/telemetry"
)

// A program's own loop serves its worker's metrics at the address of
// PARAMSERV_METRICS_ADDR (as paramserv local -- CMD sets it): every call
// counted and timed with its bytes, the steps, the global step and the
// loss the program reports, as a scrape parses them; and the status page.
func TestOwnLoopServesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tf, psDone := servePS(t, ctx, paramserv.PSConfig{})
	t.Setenv("PARAMSERV_METRICS_ADDR", "127.0.0.1:0")
	var logged []string
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  tf,
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{10}}},
		Tables:    []paramserv.Table{{Name: "emb", Dim: 4}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		Sync:      true,
		Logf:      func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) },
	}, paramserv.Params{"w": make([]float32, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.MetricsAddr() == "" {
		t.Fatal("no metrics with PARAMSERV_METRICS_ADDR set")
	}
	url := "http://" + w.MetricsAddr() + "/metrics"
	if !strings.Contains(strings.Join(logged, "\n"), "metrics: "+url) {
		t.Errorf("logged %q, want a line metrics: %s", logged, url)
	}
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		t.Fatal(err)
	}
	keys, rows := []uint64{7, 8, 9}, make([]float32, 12)
	if err := w.PullRows(ctx, "emb", keys, rows); err != nil {
		t.Fatal(err)
	}
	const steps = 20
	for i := range steps {
		w.ReportLoss(float64(steps-i), 32)
		if _, err := w.PushPullRows(ctx, grads, params, []paramserv.Rows{{Table: "emb", Keys: keys, Values: rows}}); err != nil {
			t.Fatal(err)
		}
	}
	w.ReportLoss(0.5, 32)
	f, err := telemetry.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"paramserv_worker_calls_total", []string{"call", "pull"}, 1},
		{"paramserv_worker_calls_total", []string{"call", "pull_rows"}, 1},
		{"paramserv_worker_calls_total", []string{"call", "push_pull"}, steps},
		{"paramserv_worker_call_seconds", []string{"call", "push_pull"}, steps},
		{"paramserv_worker_push_bytes_total", []string{"kind", "dense"}, steps * 40},
		{"paramserv_worker_push_bytes_total", []string{"kind", "sparse"}, steps * (3*8 + 12*4)},
		{"paramserv_worker_pull_bytes_total", []string{"kind", "dense"}, (steps + 1) * 40},
		{"paramserv_worker_pull_bytes_total", []string{"kind", "sparse"}, 12 * 4},
		{"paramserv_worker_steps_total", nil, steps},
		{"paramserv_worker_global_step", nil, steps},
		{"paramserv_worker_push_pull_seconds", nil, steps},
		{"paramserv_worker_compute_seconds", nil, steps},
		{"paramserv_worker_loss", nil, 0.5},
		{"paramserv_worker_examples_total", nil, (steps + 1) * 32},
	} {
		if got, ok := f.Value(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %g (found %v), want %g", c.name, c.labels, got, ok, c.want)
		}
	}
	resp, err := http.Get("http://" + w.MetricsAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("global step %d, %d local steps, loss 0.5", steps, steps); !strings.Contains(string(page), want) {
		t.Errorf("the status page does not say %q:\n%s", want, page)
	}
	if err := w.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-psDone; err != nil {
		t.Fatal(err)
	}
	addr := w.MetricsAddr()
	w.Close()
	if _, err := telemetry.Scrape(ctx, "http://"+addr+"/metrics"); err == nil {
		t.Error("the metrics are still served after Close")
	}
}

// "off" turns the metrics off whatever the environment says; without
// either there are none.
func TestMetricsOff(t *testing.T) {
	for _, tc := range []struct{ env, addr string }{{"127.0.0.1:0", "off"}, {"", ""}} {
		t.Setenv("PARAMSERV_METRICS_ADDR", tc.env)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		tf, _ := servePS(t, ctx, paramserv.PSConfig{})
		w, err := paramserv.Start(ctx, paramserv.Config{TFConfig: tf,
			Variables: []paramserv.Variable{{Name: "w", Shape: []int{1}}}, Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1}, MetricsAddr: tc.addr}, paramserv.Params{"w": {0}})
		if err != nil {
			t.Fatal(err)
		}
		if a := w.MetricsAddr(); a != "" {
			t.Errorf("PARAMSERV_METRICS_ADDR=%q, MetricsAddr %q: metrics served at %s, want none", tc.env, tc.addr, a)
		}
		w.ReportLoss(1, 1) // nothing to report to: no effect
		w.Done(ctx)
		w.Close()
		cancel()
	}
}

// Issue 28 (minor): under Auth (here a token) a metrics address of no host
// is served on loopback only, as paramserv train's --metrics_addr is, and
// said in the log. Before, the Go and Python APIs served it on every
// interface, in clear.
func TestMetricsLoopbackUnderAuth(t *testing.T) {
	t.Setenv("PARAMSERV_METRICS_ADDR", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := paramserv.Auth{TokenFile: token}
	tf, psDone := servePS(t, ctx, paramserv.PSConfig{Auth: auth})
	var logged []string
	w, err := paramserv.Start(ctx, paramserv.Config{TFConfig: tf, Auth: auth, MetricsAddr: ":0",
		Variables: []paramserv.Variable{{Name: "w", Shape: []int{1}}}, Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}, paramserv.Params{"w": {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if a := w.MetricsAddr(); !strings.HasPrefix(a, "127.0.0.1:") || !strings.Contains(strings.Join(logged, "\n"), "the metrics address :0 serves them on 127.0.0.1:0 only") {
		t.Errorf("MetricsAddr :0 under a token: served at %q, logged %q; want loopback only, said", a, logged)
	}
	if err := w.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-psDone; err != nil {
		t.Fatal(err)
	}
}
