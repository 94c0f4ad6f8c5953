package cli

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/telemetry"
)

// fakeChief serves the metrics a progress line reads.
type fakeChief struct {
	step    int64
	loss    float64
	scraped []string
}

func (c *fakeChief) scrape(_ context.Context, url string) (telemetry.Families, error) {
	c.scraped = append(c.scraped, url)
	return telemetry.Parse(strings.NewReader(fmt.Sprintf(
		"# TYPE paramserv_worker_global_step gauge\nparamserv_worker_global_step %d\n# TYPE paramserv_worker_loss gauge\nparamserv_worker_loss %g\n", c.step, c.loss)))
}

func TestProgressPlainLines(t *testing.T) {
	var out bytes.Buffer
	chief := &fakeChief{step: 500, loss: 0.5}
	clock := time.Unix(1000, 0)
	p := newProgress(&out, 2000)
	p.scrape, p.now = chief.scrape, func() time.Time { return clock }
	if p.tty {
		t.Fatal("a buffer taken for a terminal")
	}
	p.tick(context.Background()) // no URL yet: nothing
	fmt.Fprint(p, "[ps0] 2026/01/01 serving\n[worker0] 2026/01/01 metrics: http://127.0.0.1:9/metrics\n[worker1] part")
	fmt.Fprint(p, "ial line\n")
	p.tick(context.Background())
	clock = clock.Add(5 * time.Second)
	chief.step, chief.loss = 1000, 0.25
	p.tick(context.Background())
	want := "[ps0] 2026/01/01 serving\n[worker0] 2026/01/01 metrics: http://127.0.0.1:9/metrics\n[worker1] partial line\n" +
		"progress: global step 500/2000 (25%), loss 0.5\n" +
		"progress: global step 1000/2000 (50%), 100.0 steps/s, ETA 10s, loss 0.25\n"
	if out.String() != want {
		t.Errorf("output\n%q\nwant\n%q", out.String(), want)
	}
	if len(chief.scraped) != 2 || chief.scraped[0] != "http://127.0.0.1:9/metrics" {
		t.Errorf("scraped %v, want the chief's URL twice", chief.scraped)
	}
}

func TestProgressLiveLine(t *testing.T) {
	var out bytes.Buffer
	chief := &fakeChief{step: 10, loss: 1}
	p := newProgress(&out, 100)
	p.tty = true
	p.scrape = chief.scrape
	fmt.Fprint(p, "[worker0] metrics: http://h:1/metrics\n")
	p.tick(context.Background())
	fmt.Fprint(p, "[ps0] a line\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.run(ctx) // ends at once, clearing the live line
	live := "progress: global step 10/100 (10%), loss 1"
	want := "[worker0] metrics: http://h:1/metrics\n" + "\r\033[K" + live + "\r\033[K[ps0] a line\n" + live + "\r\033[K"
	if out.String() != want {
		t.Errorf("output\n%q\nwant\n%q", out.String(), want)
	}
}

// `paramserv local -- CMD` gives each worker a metrics port of its own in
// PARAMSERV_METRICS_ADDR, and the progress line reads worker 0's at once,
// with no train_steps to count against (the program's own goal); an
// empty --metrics_addr gives none.
func TestOwnLoopMetricsAndProgress(t *testing.T) {
	f := &telemetryFlags{}
	envs, url, err := f.ownLoopEnvs(false, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 2 || len(envs[0]) != 1 || len(envs[1]) != 1 || envs[0][0] == envs[1][0] ||
		!strings.HasPrefix(envs[0][0], "PARAMSERV_METRICS_ADDR=127.0.0.1:") {
		t.Fatalf("envs %q, want a PARAMSERV_METRICS_ADDR=127.0.0.1:PORT of its own for each worker", envs)
	}
	if want := "http://" + strings.TrimPrefix(envs[0][0], "PARAMSERV_METRICS_ADDR=") + "/metrics"; url != want {
		t.Fatalf("chief URL %q, want %q", url, want)
	}
	if envs, url, _ := (&telemetryFlags{metricsAddr: ""}).ownLoopEnvs(true, 2); envs != nil || url != "" {
		t.Fatalf("--metrics_addr= gave %q %q, want no metrics", envs, url)
	}

	var out bytes.Buffer
	chief := &fakeChief{step: 30, loss: 0.75}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, _, stop := startProgress(ctx, &out, &out, true, 0, url)
	p := w.(*progressStream).p
	p.mu.Lock()
	p.scrape = chief.scrape
	p.mu.Unlock()
	p.tick(ctx)
	stop()
	if got, want := out.String(), "progress: global step 30, loss 0.75\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if len(chief.scraped) != 1 || chief.scraped[0] != url {
		t.Errorf("scraped %v, want %s", chief.scraped, url)
	}
}

// A worker of a model written on the public API (deep_ctr, mf, lda,
// logreg_lbfgs) counts its steps and losses in its own session, so the
// session serves its metrics at --metrics_addr and train serves none of its
// own: an endpoint of train's would read global step 0 and loss 0 for the
// whole run, and so would `paramserv local`'s progress line. A ps, or a
// built-in model's worker, is served by train as before.
func TestProgramWorkerServesItsSessionsMetrics(t *testing.T) {
	f := &telemetryFlags{metricsAddr: "127.0.0.1:0"}
	if got := f.programMetricsAddr(); got != "127.0.0.1:0" {
		t.Errorf("programMetricsAddr = %q, want --metrics_addr's 127.0.0.1:0", got)
	}
	if got := (&telemetryFlags{}).programMetricsAddr(); got != "off" {
		t.Errorf("programMetricsAddr with --metrics_addr= = %q, want off (none, whatever PARAMSERV_METRICS_ADDR says)", got)
	}
	for _, program := range []bool{true, false} {
		var cfg taskConfig
		cfg.Cluster.Task.Job = "worker"
		var lines []string
		stop, err := f.start(&cfg, false, program, func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) })
		if err != nil {
			t.Fatal(err)
		}
		stop()
		served := slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "metrics: http://") })
		if served == program {
			t.Errorf("program worker %v: train served metrics %v (lines %q), want %v", program, served, lines, !program)
		}
	}
}
