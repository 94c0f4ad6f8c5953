package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/telemetry"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

var metricsLine = regexp.MustCompile(`metrics: (http://127\.0\.0\.1:\d+/metrics)`)

// metricsURL waits for the process's one "metrics: URL" line.
func metricsURL(t *testing.T, p *proc) string {
	t.Helper()
	p.waitFor(t, "/metrics", 30*time.Second)
	m := metricsLine.FindAllStringSubmatch(p.output(), -1)
	if len(m) != 1 {
		t.Fatalf("%s logged %d metrics lines, want 1", p.name, len(m))
	}
	return m[0][1]
}

func scrape(t *testing.T, url string) telemetry.Families {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := telemetry.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// want checks one series' value with cmp ("==", ">", ">=").
func want(t *testing.T, where string, f telemetry.Families, cmp string, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := f.Value(name, labels...)
	switch {
	case !ok:
		t.Errorf("%s: no series %s%v", where, name, labels)
	case cmp == "==" && got != v, cmp == ">" && !(got > v), cmp == ">=" && !(got >= v), cmp == "<=" && !(got <= v):
		t.Errorf("%s: %s%v = %g, want %s %g", where, name, labels, got, cmp, v)
	}
}

// TestMetricsOfLiveCluster scrapes real processes: a synchronous job's ps
// after training (its step, pushes by verdict, bytes, a rejected push,
// waits), and the worker of an asynchronous job while it trains.
func TestMetricsOfLiveCluster(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps, workers := hosts[:1], hosts[1:]
	const steps = 300
	on := "--metrics_addr=127.0.0.1:0"
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), on, "--ps_wait_forever")...)
	psURL := metricsURL(t, p0)
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), on, "--sync_replicas", "--train_steps=300")...)
	w0.waitFor(t, "chief initialised", 30*time.Second)
	// The chief waits at step 0 for worker 1: a bad push lands now.
	conn, err := grpc.NewClient(ps[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = pb.NewParamServerClient(conn).Push(ctx, &pb.PushRequest{Worker: 1, Grads: []*pb.DenseTensor{
		{Name: "weight", Data: wire.Float32Bytes([]float32{float32(math.NaN())})}, {Name: "bias", Data: wire.Float32Bytes([]float32{1})}}})
	cancel()
	if err == nil {
		t.Fatal("a NaN gradient was accepted")
	}
	wf := scrape(t, metricsURL(t, w0))
	want(t, "waiting chief", wf, ">", 0, "process_resident_memory_bytes")
	want(t, "waiting chief", wf, ">", 0, "go_goroutines")
	if _, ok := wf.Value("paramserv_worker_steps_total"); !ok {
		t.Errorf("waiting chief: no paramserv_worker_steps_total")
	}

	w1 := start(t, "worker1", nil, append(clusterArgs(ps, workers, "worker", 1), "--sync_replicas", "--train_steps=300")...)
	for _, p := range []*proc{w0, w1} {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	if strings.Contains(w1.output(), "metrics:") {
		t.Errorf("worker 1 without --metrics_addr served metrics")
	}
	f := scrape(t, psURL)
	where := "ps after a synchronous job"
	want(t, where, f, "==", steps, "paramserv_ps_global_step")
	want(t, where, f, "==", steps, "paramserv_ps_pushes_total", "verdict", "completed")
	want(t, where, f, ">=", steps, "paramserv_ps_pushes_total", "verdict", "accumulated")
	want(t, where, f, "==", 1, "paramserv_ps_rejected_pushes_total", "reason", "invalid_request")
	want(t, where, f, ">=", 2*steps, "paramserv_ps_pulls_total")
	// linreg: a weight and a bias, 8 bytes a push.
	want(t, where, f, ">=", 2*steps*8, "paramserv_ps_push_bytes_total", "kind", "dense")
	want(t, where, f, ">=", 2*steps*8, "paramserv_ps_pull_bytes_total", "kind", "dense")
	want(t, where, f, ">=", 2*steps, "paramserv_ps_push_apply_seconds")
	want(t, where, f, ">", 0, "paramserv_ps_sync_wait_seconds")
	want(t, where, f, "==", 2, "paramserv_ps_workers_done")
	want(t, where, f, ">=", 0, "paramserv_ps_worker_last_request_age_seconds", "worker", "1")
	want(t, where, f, ">", 0, "process_resident_memory_bytes")
	// The status page beside the metrics says the same.
	resp, err := http.Get(strings.TrimSuffix(psURL, "metrics"))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{"global step 300, sync", "pushes: 600 applied", "workers (2 of 2 done)"} {
		if !strings.Contains(string(page), s) {
			t.Errorf("the ps's status page lacks %q:\n%s", s, page)
		}
	}
	p0.cmd.Process.Signal(syscall.SIGTERM)
	p0.wait(t, time.Minute)

	// An asynchronous job scraped while it trains (a goal it never reaches).
	hosts = freeHosts(t, 2)
	ps, workers = hosts[:1], hosts[1:]
	a0 := start(t, "async ps0", nil, append(clusterArgs(ps, workers, "ps", 0), on)...)
	aw := start(t, "async worker0", nil, append(clusterArgs(ps, workers, "worker", 0), on, "--train_steps=1000000000")...)
	wURL, psURL := metricsURL(t, aw), metricsURL(t, a0)
	deadline := time.Now().Add(time.Minute)
	for {
		f = scrape(t, wURL)
		if n, _ := f.Value("paramserv_worker_steps_total"); n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's paramserv_worker_steps_total never reached 200")
		}
		time.Sleep(20 * time.Millisecond)
	}
	local, _ := f.Value("paramserv_worker_steps_total")
	// One worker, asynchronous: the global step is its own step count,
	// give or take the step in flight. A scrape gathers its series at
	// different moments while training goes on (a linreg step is a fraction
	// of a millisecond, and a loaded machine stretches a gather to tens of
	// them), so one scrape's series are compared with the next scrape's,
	// which is later than all of them.
	g := scrape(t, wURL)
	later, _ := g.Value("paramserv_worker_steps_total")
	want(t, "training worker", g, ">=", local-2, "paramserv_worker_global_step")
	want(t, "training worker", f, "<=", later+2, "paramserv_worker_global_step")
	want(t, "training worker", g, ">=", 100*(local-2), "paramserv_worker_examples_total") // --batch_size=100
	want(t, "training worker", g, ">=", local-2, "paramserv_worker_push_pull_seconds")
	want(t, "training worker", f, ">", 0, "paramserv_worker_loss")
	pf := scrape(t, psURL)
	want(t, "training ps", pf, ">=", local, "paramserv_ps_global_step")
	want(t, "training ps", pf, ">=", local, "paramserv_ps_pushes_total", "verdict", "applied")
	for _, p := range []*proc{aw, a0} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t, time.Minute)
	}
}

// TestLocalGivesEveryProcessMetrics: paramserv local starts every process
// with its own loopback metrics port, each logged once; a fixed port for
// several processes or a malformed address is input to fix.
func TestLocalGivesEveryProcessMetrics(t *testing.T) {
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=50")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("local exited %d", code)
	}
	for _, role := range []string{"[ps0]", "[worker0]", "[worker1]"} {
		n := 0
		for _, line := range strings.Split(p.output(), "\n") {
			if strings.HasPrefix(line, role) && metricsLine.MatchString(line) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s logged %d metrics lines, want 1", role, n)
		}
	}
	off := start(t, "local off", nil, "local", "--ps=1", "--workers=1", "--model=linreg", "--train_steps=50", "--metrics_addr=")
	if code := off.wait(t, 2*time.Minute); code != 0 || strings.Contains(off.output(), "metrics: http") {
		t.Errorf("local --metrics_addr= exited %d and served metrics: %v", code, strings.Contains(off.output(), "metrics: http"))
	}
	for _, addr := range []string{"127.0.0.1:9464", "nonsense"} {
		bad := start(t, "local "+addr, nil, "local", "--ps=1", "--workers=1", "--metrics_addr="+addr)
		if code := bad.wait(t, time.Minute); code != 2 || !strings.Contains(bad.output(), "--metrics_addr") {
			t.Errorf("local --metrics_addr=%s exited %d, want 2 naming the flag", addr, code)
		}
	}
}

// TestLogFormatJSON: with --log_format=json every line a task logs is a
// JSON object with time, level and msg; another format is input to fix.
func TestLogFormatJSON(t *testing.T) {
	hosts := freeHosts(t, 2)
	p := start(t, "ps0", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), "--log_format=json", "--metrics_addr=127.0.0.1:0")...)
	p.waitFor(t, "/metrics", 30*time.Second)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
	lines := strings.Split(strings.TrimSpace(p.output()), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d lines, want at least 3", len(lines))
	}
	for _, line := range lines {
		var obj struct{ Time, Level, Msg string }
		if err := json.Unmarshal([]byte(line), &obj); err != nil || obj.Time == "" || obj.Level != "INFO" || obj.Msg == "" {
			t.Errorf("line %q is not a JSON log object (%v)", line, err)
		}
	}
	if !strings.Contains(p.output(), `"msg":"metrics: http://127.0.0.1:`) {
		t.Errorf("no metrics line among\n%s", p.output())
	}
	bad := start(t, "ps bad", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), "--log_format=xml")...)
	if code := bad.wait(t, time.Minute); code != 2 || !strings.Contains(bad.output(), "--log_format") {
		t.Errorf("--log_format=xml exited %d, want 2 naming the flag", code)
	}
}
