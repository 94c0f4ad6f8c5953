package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/telemetry"
	"github.com/paramserv/paramserv/internal/tfevents"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// telemetryFlags are the flags of metrics (and, later, summaries) shared
// by `paramserv train` and `paramserv local`.
type telemetryFlags struct {
	metricsAddr        string
	summaryDir         string
	saveSummariesSteps int64
	logFormat          string
}

func defineTelemetryFlags(fs *flag.FlagSet) *telemetryFlags {
	f := &telemetryFlags{}
	fs.StringVar(&f.metricsAddr, "metrics_addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: a free one, logged); empty: off. paramserv local gives each process a free loopback port unless set")
	fs.StringVar(&f.summaryDir, "summary_dir", "", "the chief writes TensorBoard event files (events.out.tfevents.*: loss, global_step/sec, examples/sec, dropped pushes, final metrics) here (default: --checkpoint_dir, if set)")
	fs.Int64Var(&f.saveSummariesSteps, "save_summaries_steps", 100, "the chief writes a summary every this many global steps")
	fs.StringVar(&f.logFormat, "log_format", "text", "log lines as text (date, time, message) or json (one object a line with time, level and msg, from log/slog)")
	return f
}

// check refuses a --metrics_addr that is not HOST:PORT.
func (f *telemetryFlags) check() error {
	if f.metricsAddr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(f.metricsAddr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("--metrics_addr=%q: want HOST:PORT (port 0: a free one), or empty for no metrics", f.metricsAddr)
	}
	return nil
}

// logger returns the log function of --log_format (text for a value
// check refuses).
func (f *telemetryFlags) logger(w io.Writer) func(string, ...any) {
	if f.logFormat == "json" {
		l := slog.New(slog.NewJSONHandler(w, nil))
		return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
	}
	return newLogger(w)
}

// checkSummaries refuses --save_summaries_steps below 1.
func (f *telemetryFlags) checkSummaries() error {
	if f.saveSummariesSteps < 1 {
		return fmt.Errorf("--save_summaries_steps=%d: want a number >= 1", f.saveSummariesSteps)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("--log_format=%q: want text or json", f.logFormat)
	}
	return nil
}

// localArgs returns the telemetry flags `paramserv local` passes to every
// process: each its own free loopback port unless --metrics_addr was given
// (empty turns metrics off; a fixed port cannot serve several processes).
func (f *telemetryFlags) localArgs(given bool, processes int) ([]string, error) {
	if !given {
		return []string{"--metrics_addr=127.0.0.1:0"}, nil
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.metricsAddr != "" && processes > 1 {
		if _, port, _ := net.SplitHostPort(f.metricsAddr); port != "0" {
			return nil, fmt.Errorf("--metrics_addr=%s: %d processes cannot share one port; give port 0 (each a free one) or leave it out", f.metricsAddr, processes)
		}
	}
	return nil, nil // passed on with the other flags
}

// ownLoopEnvs returns, for `paramserv local -- CMD`, each worker's
// PARAMSERV_METRICS_ADDR (a free loopback port of its own, or one on the
// host of --metrics_addr, which the public Go API and the Python binding
// serve their metrics at) and worker 0's metrics URL for the progress
// line; nothing when --metrics_addr= turned metrics off.
func (f *telemetryFlags) ownLoopEnvs(given bool, numWorkers int) (envs [][]string, chiefURL string, err error) {
	host := "127.0.0.1"
	if given {
		if f.metricsAddr == "" {
			return nil, "", nil
		}
		host, _, _ = net.SplitHostPort(f.metricsAddr) // checked by localArgs
	}
	ports, err := local.FreePorts(numWorkers)
	if err != nil {
		return nil, "", err
	}
	for i, p := range ports {
		addr := net.JoinHostPort(host, strconv.Itoa(p))
		envs = append(envs, []string{"PARAMSERV_METRICS_ADDR=" + addr})
		if i == 0 {
			chiefURL = "http://" + addr + "/metrics"
		}
	}
	return envs, chiefURL, nil
}

// programMetricsAddr is where a worker of a model written on the public
// API serves its metrics (paramserv.Config.MetricsAddr): --metrics_addr,
// or "off" when it is empty. Its own session counts the steps and losses;
// an endpoint of the command's own would show nothing of them.
func (f *telemetryFlags) programMetricsAddr() string { return cmp.Or(f.metricsAddr, "off") }

// start serves the task's metrics if --metrics_addr is set, and hooks the
// ps's server or the worker's loop to them in cfg. stop ends the endpoint.
// auth: the task authenticates its connections (telemetry.ListenAddr).
// program: the task is a worker of a model written on the public API
// (programs), which serves its own metrics at programMetricsAddr.
func (f *telemetryFlags) start(cfg *taskConfig, auth, program bool, logf func(string, ...any)) (stop func(), err error) {
	var summaries *tfevents.Summaries
	if dir := cmp.Or(f.summaryDir, cfg.CheckpointDir); dir != "" && cfg.Cluster.IsChief() {
		w, err := tfevents.Create(dir, time.Now())
		if err != nil {
			return nil, &trainer.ConfigError{Err: fmt.Errorf("--summary_dir=%s: %w", dir, err)}
		}
		logf("summaries: %s every %d global steps", w.Path(), f.saveSummariesSteps)
		perStep := max(cfg.Data.BatchSize, 1)
		if cfg.Sync {
			perStep *= cmp.Or(cfg.ReplicasToAggregate, len(cfg.Cluster.Spec.Workers))
		}
		summaries = &tfevents.Summaries{W: w, Every: f.saveSummariesSteps, ExamplesPerStep: perStep, Logf: logf}
		if sched, err := optim.NewScheduled(cfg.Optimizer, nil); err == nil {
			summaries.Rate = sched.Rate
		}
		cfg.Observer = summaries
	}
	closeSummaries := func() {
		if summaries != nil {
			if err := summaries.W.Close(); err != nil {
				logf("summaries: %v", err)
			}
		}
	}
	if f.metricsAddr == "" || (program && cfg.Cluster.Task.Job == cluster.JobWorker) {
		return closeSummaries, nil
	}
	reg := telemetry.NewRegistry()
	var page http.Handler
	if cfg.Cluster.Task.Job == cluster.JobPS {
		ps := telemetry.NewPS(reg)
		page = ps.Page(cfg.Cluster.Task.Index, cfg.Cluster.Addr())
		cfg.PS.PSObserver = ps
		cfg.PS.OnServe = func(s *server.Server) {
			ps.Watch(func() telemetry.PSState {
				st, _ := s.Status(context.Background(), &pb.StatusRequest{Details: true})
				_, seen := s.WorkerActivity()
				return telemetry.PSState{Status: st, LastSeen: seen}
			})
		}
	} else {
		w := telemetry.NewWorker(reg)
		page = w.Page()
		if summaries != nil {
			w.Next = summaries
		}
		cfg.Observer = w
		cfg.Data.LoadProgress = w.DataLoad
	}
	srv, err := telemetry.Serve(telemetry.ListenAddr(f.metricsAddr, auth, logf), reg, page, logf)
	if err != nil {
		closeSummaries()
		return nil, err
	}
	return func() { _ = srv.Close(); closeSummaries() }, nil
}
