package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadAndRestoreProgressMetrics scrapes real processes: a sparse_lr
// worker's metrics count every row and byte of the data file it loaded,
// its load at 1; and a ps restarted on the job's checkpoints counts the
// bytes of the shard files it read, its restore at 1.
func TestLoadAndRestoreProgressMetrics(t *testing.T) {
	dir := t.TempDir()
	train, test, ckpt := filepath.Join(dir, "train.libsvm"), filepath.Join(dir, "test.libsvm"), filepath.Join(dir, "ckpt")
	for _, f := range []struct {
		path string
		rows int
	}{{train, 3000}, {test, 300}} {
		var b strings.Builder
		for i := range f.rows {
			fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", 2*(i%2)-1, 1+i%50, 51+i%7)
		}
		if err := os.WriteFile(f.path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(train)
	if err != nil {
		t.Fatal(err)
	}
	hosts := freeHosts(t, 2)
	ps, workers := hosts[:1], hosts[1:]
	on := "--metrics_addr=127.0.0.1:0"
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), on, "--checkpoint_dir="+ckpt)...)
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), on, "--checkpoint_dir="+ckpt, "--save_steps=20",
		"--model=sparse_lr", "--train_data="+train, "--test_data="+test, "--input_format=libsvm", "--batch_size=50", "--train_steps=1000000000")...)
	wURL := metricsURL(t, w0)
	p0.waitFor(t, "checkpoint: wrote", time.Minute)
	f := scrape(t, wURL)
	want(t, "worker", f, "==", 3000, "paramserv_worker_data_rows_loaded_total", "data", "training")
	want(t, "worker", f, "==", float64(fi.Size()), "paramserv_worker_data_read_bytes_total", "data", "training")
	want(t, "worker", f, "==", 1, "paramserv_worker_data_load_progress_ratio", "data", "training")
	for _, p := range []*proc{w0, p0} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t, time.Minute)
	}

	r0 := start(t, "restarted ps0", nil, append(clusterArgs(ps, workers, "ps", 0), on, "--checkpoint_dir="+ckpt)...)
	psURL := metricsURL(t, r0)
	r0.waitFor(t, "restored checkpoint of step", time.Minute)
	f = scrape(t, psURL)
	// The newest checkpoint's one shard file, read to verify it, then to
	// restore it.
	size, _ := f.Value("paramserv_ps_checkpoint_restore_bytes_total")
	want(t, "restarted ps", f, ">", 0, "paramserv_ps_checkpoint_restore_bytes_total")
	want(t, "restarted ps", f, "==", 2*size, "paramserv_ps_restore_read_bytes_total")
	want(t, "restarted ps", f, "==", 1, "paramserv_ps_restore_progress_ratio")
	want(t, "restarted ps", f, "==", 1, "paramserv_ps_restores_total", "trigger", "start")
	r0.cmd.Process.Signal(syscall.SIGTERM)
	r0.wait(t, time.Minute)
}
