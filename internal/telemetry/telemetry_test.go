package telemetry

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

func TestServeAndScrape(t *testing.T) {
	reg := NewRegistry()
	ps := NewPS(reg)
	w := NewWorker(reg)
	ps.Pushed("apply", 800, 0, time.Millisecond)
	ps.Pushed("drop-stale", 800, 0, time.Millisecond)
	ps.Pushed("drop-duplicate", 0, 96, time.Millisecond)
	ps.Rejected("invalid request")
	ps.Rejected("not ready")
	ps.Pulled(800, 40, 2*time.Millisecond)
	ps.SyncWaited(time.Second)
	ps.CheckpointSaved(1000, time.Second, nil)
	ps.CheckpointSaved(0, time.Second, errors.New("disk full"))
	ps.CheckpointRestored(true, 1000, time.Second, nil)
	ps.CheckpointRestored(false, 1000, time.Second, nil)
	ps.Watch(func() PSState {
		return PSState{
			Status:   &pb.StatusResponse{Initialized: true, GlobalStep: 42, NumWorkers: 2, Tables: []*pb.TableStatus{{Name: "w", Rows: 7, Bytes: 700, Admitted: 9, Evicted: 2}}},
			LastSeen: map[int]time.Time{1: time.Now().Add(-3 * time.Second)},
		}
	})
	w.Step(lifecycle.StepStats{GlobalStep: 5, LocalStep: 1, Loss: 0.5, Examples: 100, Compute: time.Millisecond, Exchange: time.Millisecond, Dropped: true})
	w.CheckpointSaved(5, 2000, time.Second, nil)
	w.Recovery(errors.New("ps 0 unavailable"))
	w.Final(5, map[string]float64{"test_auc": 0.9})

	var logged []string
	srv, err := Serve("127.0.0.1:0", reg, nil, func(f string, a ...any) { logged = append(logged, f) })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if len(logged) != 1 || !strings.HasPrefix(logged[0], "metrics: http://") {
		t.Errorf("logged %q, want one metrics: line", logged)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := Scrape(ctx, "http://"+srv.Addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"paramserv_ps_pushes_total", []string{"verdict", "applied"}, 1},
		{"paramserv_ps_pushes_total", []string{"verdict", "stale"}, 1},
		{"paramserv_ps_pushes_total", []string{"verdict", "duplicate"}, 1},
		{"paramserv_ps_push_bytes_total", []string{"kind", "dense"}, 1600},
		{"paramserv_ps_push_bytes_total", []string{"kind", "sparse"}, 96},
		{"paramserv_ps_rejected_pushes_total", []string{"reason", "invalid_request"}, 1},
		{"paramserv_ps_rejected_pushes_total", []string{"reason", "not_ready"}, 1},
		{"paramserv_ps_pulls_total", nil, 1},
		{"paramserv_ps_pull_bytes_total", []string{"kind", "sparse"}, 40},
		{"paramserv_ps_push_apply_seconds", nil, 3},
		{"paramserv_ps_sync_wait_seconds", nil, 1},
		{"paramserv_ps_checkpoint_save_seconds", nil, 1},
		{"paramserv_ps_checkpoint_save_bytes_total", nil, 1000},
		{"paramserv_ps_checkpoint_save_failures_total", nil, 1},
		{"paramserv_ps_restores_total", []string{"trigger", "start"}, 1},
		{"paramserv_ps_restores_total", []string{"trigger", "rollback"}, 1},
		{"paramserv_ps_checkpoint_restore_bytes_total", nil, 2000},
		{"paramserv_ps_global_step", nil, 42},
		{"paramserv_ps_initialized", nil, 1},
		{"paramserv_ps_table_rows", []string{"table", "w"}, 7},
		{"paramserv_ps_table_bytes", []string{"table", "w"}, 700},
		{"paramserv_ps_table_admitted_rows_total", []string{"table", "w"}, 9},
		{"paramserv_ps_table_evicted_rows_total", []string{"table", "w"}, 2},
		{"paramserv_worker_steps_total", nil, 1},
		{"paramserv_worker_examples_total", nil, 100},
		{"paramserv_worker_dropped_pushes_total", nil, 1},
		{"paramserv_worker_global_step", nil, 5},
		{"paramserv_worker_loss", nil, 0.5},
		{"paramserv_worker_checkpoint_save_bytes_total", nil, 2000},
		{"paramserv_worker_recoveries_total", nil, 1},
		{"paramserv_worker_final_metric", []string{"metric", "test_auc"}, 0.9},
	} {
		got, ok := f.Value(c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %g (found %v), want %g", c.name, c.labels, got, ok, c.want)
		}
	}
	if age, _ := f.Value("paramserv_ps_worker_last_request_age_seconds", "worker", "1"); age < 3 {
		t.Errorf("worker 1's last request age %gs, want >= 3", age)
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_memstats_heap_alloc_bytes"} {
		if v, ok := f.Value(name); !ok || v <= 0 {
			t.Errorf("%s = %g (found %v), want > 0", name, v, ok)
		}
	}
}

func TestServeRefusesBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Serve(l.Addr().String(), NewRegistry(), nil, nil)
	var le *ListenError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "--metrics_addr="+l.Addr().String()) {
		t.Errorf("Serve on a busy port: %v, want a ListenError naming the flag", err)
	}
}

// gather reads reg's metrics as a scrape would.
func gather(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}) Families {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	f := Families{}
	for _, m := range mfs {
		f[m.GetName()] = m
	}
	return f
}

// The progress of data loads and restores: counters of what was read,
// from the cumulative updates, and a gauge of the latest load's share.
func TestLoadAndRestoreProgress(t *testing.T) {
	reg := NewRegistry()
	w, ps := NewWorker(reg), NewPS(reg)
	w.DataLoad("training", progress.Update{Bytes: 100, Rows: 10, Total: 400})
	w.DataLoad("training", progress.Update{Bytes: 300, Rows: 30, Total: 400})
	f := gather(t, reg)
	if v, _ := f.Value("paramserv_worker_data_load_progress_ratio", "data", "training"); v != 0.75 {
		t.Errorf("training load progress %g, want 0.75", v)
	}
	w.DataLoad("training", progress.Update{Bytes: 400, Rows: 40, Total: 400, Done: true})
	w.DataLoad("test", progress.Update{Bytes: 50, Rows: 5, Total: 100})
	w.DataLoad("test", progress.Update{Bytes: 100, Rows: 10, Total: 100, Done: true})
	w.DataLoad("test", progress.Update{Bytes: 20, Rows: 2, Total: 100}) // loaded again
	ps.RestoreProgress(progress.Update{What: "verifying", Bytes: 1000})
	ps.RestoreProgress(progress.Update{What: "verifying", Bytes: 3000, Done: true})
	ps.RestoreProgress(progress.Update{What: "restoring", Bytes: 500, Total: 2000})
	f = gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"paramserv_worker_data_rows_loaded_total", []string{"data", "training"}, 40},
		{"paramserv_worker_data_read_bytes_total", []string{"data", "training"}, 400},
		{"paramserv_worker_data_load_progress_ratio", []string{"data", "training"}, 1},
		{"paramserv_worker_data_rows_loaded_total", []string{"data", "test"}, 12},
		{"paramserv_worker_data_read_bytes_total", []string{"data", "test"}, 120},
		{"paramserv_worker_data_load_progress_ratio", []string{"data", "test"}, 0.2},
		{"paramserv_ps_restore_read_bytes_total", nil, 3500},
		{"paramserv_ps_restore_progress_ratio", nil, 0.25},
	} {
		if got, ok := f.Value(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %g (found %v), want %g", c.name, c.labels, got, ok, c.want)
		}
	}
}

// A program's own loop that has reported no loss shows none: the gauge
// is NaN (which paramserv local's progress line leaves out), not 0, and
// the status page says so; the first ReportLoss sets it.
func TestOwnLoopLossUnsetUntilReported(t *testing.T) {
	reg := NewRegistry()
	w := NewWorker(reg)
	c := NewCalls(reg, w)
	c.Stepped(0, 5, 1, time.Millisecond, time.Millisecond, false)
	if v, ok := gather(t, reg).Value("paramserv_worker_loss"); !ok || !math.IsNaN(v) {
		t.Errorf("loss before any report: %v (present %v), want NaN", v, ok)
	}
	if s := w.text(); !strings.Contains(s, "no loss reported") {
		t.Errorf("status page before any report: %q, want it to say no loss was reported", s)
	}
	c.Loss(0.5, 8)
	if v, _ := gather(t, reg).Value("paramserv_worker_loss"); v != 0.5 {
		t.Errorf("loss after ReportLoss(0.5): %v", v)
	}
}
