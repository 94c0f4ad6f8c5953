// Package trainer runs one task of a training job: a ps (RunPS) or a worker
// (RunWorker). A worker connects to every ps, waits for them (logging what
// it waits for), has the chief initialise the variables, then loops: compute
// gradients on its own batch, PushPull them, until the global step reaches
// the goal. The chief then evaluates the final parameters and writes the
// result file; every worker tells the ps it is done, and the ps exit.
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
)

// Config is everything a task needs.
type Config struct {
	Cluster cluster.Config
	Model   string       // "linreg", "mnist"
	Data    model.Config // Worker and NumWorkers are filled in from Cluster

	Optimizer           optim.Config
	Sync                bool
	ReplicasToAggregate int // 0 means the number of workers
	MaxStaleness        int64

	TrainSteps      int64
	StepsToValidate int64
	StartupTimeout  time.Duration
	SplitBytes      int
	ResultFile      string
	PSWaitForever   bool

	// Logf receives every log line; nil discards them.
	Logf func(format string, args ...any)
	// WaitLogEvery is how often a wait logs what it waits for (5s if 0).
	WaitLogEvery time.Duration
}

// ConfigError marks a configuration the user must fix (exit status 2).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func (c *Config) defaults() {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.WaitLogEvery <= 0 {
		c.WaitLogEvery = 5 * time.Second
	}
	if c.StartupTimeout <= 0 {
		c.StartupTimeout = 5 * time.Minute
	}
	if c.StepsToValidate <= 0 {
		c.StepsToValidate = 100
	}
	if c.ReplicasToAggregate <= 0 {
		c.ReplicasToAggregate = len(c.Cluster.Spec.Workers)
	}
}

// RunPS serves one ps until every worker is done or ctx ends.
func RunPS(ctx context.Context, cfg Config) error {
	cfg.defaults()
	s := server.New(server.Config{
		Task:         cfg.Cluster.Task.Index,
		NumWorkers:   len(cfg.Cluster.Spec.Workers),
		WaitForever:  cfg.PSWaitForever,
		Logf:         cfg.Logf,
		WaitLogEvery: cfg.WaitLogEvery,
	})
	err := server.Serve(ctx, cfg.Cluster.Addr(), s)
	var le *server.ListenError
	if errors.As(err, &le) {
		return &ConfigError{Err: err}
	}
	return err
}

// Result is what the chief writes to --result_file.
type Result struct {
	Model               string             `json:"model"`
	Mode                string             `json:"mode"`
	GlobalStep          int64              `json:"global_step"`
	LocalSteps          int64              `json:"local_steps"`
	ElapsedS            float64            `json:"elapsed_s"`
	StaleDropped        int64              `json:"stale_dropped"`
	RejectedPushes      int64              `json:"rejected_pushes"`
	Loss                float64            `json:"loss"`
	TrainLoss           float64            `json:"train_loss"`
	Workers             int                `json:"workers"`
	PS                  int                `json:"ps"`
	ReplicasToAggregate int                `json:"replicas_to_aggregate,omitempty"`
	Optimizer           string             `json:"optimizer"`
	LearningRate        float64            `json:"learning_rate"`
	ExamplesPerS        float64            `json:"examples_per_s"`
	ComputeS            float64            `json:"compute_s"`
	PushPullS           float64            `json:"push_pull_s"`
	Metrics             map[string]float64 `json:"metrics"`
	Weight              *float64           `json:"weight,omitempty"`
	Bias                *float64           `json:"bias,omitempty"`
	ValCrossEntropy     *float64           `json:"val_cross_entropy,omitempty"`
	ValAccuracy         *float64           `json:"val_accuracy,omitempty"`
	TestAccuracy        *float64           `json:"test_accuracy,omitempty"`
}

// RunWorker trains until the global step reaches cfg.TrainSteps.
func RunWorker(ctx context.Context, cfg Config) error {
	cfg.defaults()
	start := time.Now()
	worker := cfg.Cluster.Task.Index
	numWorkers := len(cfg.Cluster.Spec.Workers)
	data := cfg.Data
	data.Worker, data.NumWorkers = worker, numWorkers
	m, err := NewModel(cfg.Model, data)
	if err != nil {
		return &ConfigError{Err: err}
	}
	if cfg.Sync && cfg.ReplicasToAggregate > numWorkers {
		return &ConfigError{Err: fmt.Errorf("--replicas_to_aggregate=%d is more than the %d workers", cfg.ReplicasToAggregate, numWorkers)}
	}
	c, err := client.New(cfg.Cluster.Spec.PS, m.Variables(), client.Options{
		Worker: worker, SplitBytes: cfg.SplitBytes, Logf: cfg.Logf, WaitLogEvery: cfg.WaitLogEvery,
	})
	if err != nil {
		return err
	}
	defer c.Close()

	wctx, cancel := context.WithTimeoutCause(ctx, cfg.StartupTimeout,
		fmt.Errorf("--startup_timeout=%s passed", cfg.StartupTimeout))
	if cfg.Cluster.IsChief() {
		if _, err = c.WaitReady(wctx, false); err == nil {
			var step int64
			step, err = c.Init(wctx, m.Init(cfg.Data.Seed), client.InitOptions{
				Optimizer: cfg.Optimizer, Sync: cfg.Sync, ReplicasToAggregate: cfg.ReplicasToAggregate,
				NumWorkers: numWorkers, MaxStaleness: cfg.MaxStaleness,
			})
			if err == nil {
				cfg.Logf("chief initialised %d variables on %d ps at global step %d", len(m.Variables()), c.NumPS(), step)
			}
		}
	} else {
		_, err = c.WaitReady(wctx, true)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("worker %d: start-up: %w", worker, err)
	}

	params := model.NewParams(m.Variables())
	grads := model.NewParams(m.Variables())
	step, err := c.Pull(ctx, 0, params)
	if err != nil {
		return fmt.Errorf("worker %d: first pull: %w", worker, err)
	}
	trainStart := time.Now()
	var local, dropped int64
	var loss float64
	var computeT, commT time.Duration
	for step < cfg.TrainSteps {
		t0 := time.Now()
		loss, err = m.ComputeGradients(params, grads)
		if err != nil {
			return fmt.Errorf("worker %d: step %d: %w", worker, step, err)
		}
		t1 := time.Now()
		computeT += t1.Sub(t0)
		var minStep int64
		if cfg.Sync {
			minStep = step + 1
		}
		call := c.PushPullAsync(ctx, step, grads, minStep, params)
		if err := waitCall(call, cfg, fmt.Sprintf("push of step %d and pull of step %d", step, minStep)); err != nil {
			return fmt.Errorf("worker %d: step %d: %w", worker, step, err)
		}
		commT += time.Since(t1)
		local++
		if call.Dropped {
			dropped++
		}
		step = call.Step
		if local%cfg.StepsToValidate == 0 {
			cfg.Logf("%s", m.Progress(local, step, params, loss))
		}
	}
	elapsed := time.Since(trainStart)
	cfg.Logf("worker %d: finished at global step %d after %d local steps (%d of its pushes dropped as stale)", worker, step, local, dropped)
	cfg.Logf("Training elapsed time: %.1f s", elapsed.Seconds())

	if cfg.Cluster.IsChief() {
		if err := finish(ctx, cfg, c, m, params, Result{
			Model: cfg.Model, LocalSteps: local, TrainLoss: loss, Workers: numWorkers, PS: c.NumPS(),
			Optimizer: cfg.Optimizer.Name, LearningRate: cfg.Optimizer.LearningRate,
			ElapsedS: time.Since(start).Seconds(), ComputeS: computeT.Seconds(), PushPullS: commT.Seconds(),
			ExamplesPerS: float64(local) * float64(max(cfg.Data.BatchSize, 1)) / elapsed.Seconds(),
		}); err != nil {
			return err
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if err := c.Done(dctx); err != nil {
		cfg.Logf("worker %d: could not tell every ps it is done (they may not exit by themselves): %v", worker, err)
	}
	return nil
}

// finish is the chief's end: evaluate, log, write the result file.
func finish(ctx context.Context, cfg Config, c *client.Client, m model.Model, params model.Params, r Result) error {
	step, err := c.Pull(ctx, 0, params)
	if err != nil {
		return fmt.Errorf("chief: final pull: %w", err)
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("chief: final status: %w", err)
	}
	metrics, err := m.Evaluate(params)
	if err != nil {
		return fmt.Errorf("chief: evaluation: %w", err)
	}
	r.GlobalStep = step
	r.Mode = statuses[0].Mode
	r.StaleDropped = statuses[0].StaleDropped
	for _, st := range statuses {
		r.RejectedPushes += st.RejectedPushes
	}
	if r.Mode == "sync" {
		r.ReplicasToAggregate = cfg.ReplicasToAggregate
	}
	r.Metrics = metrics
	r.Loss = metrics["loss"]
	pick := func(k string) *float64 {
		if v, ok := metrics[k]; ok {
			return &v
		}
		return nil
	}
	r.Weight, r.Bias = pick("weight"), pick("bias")
	r.ValCrossEntropy, r.ValAccuracy, r.TestAccuracy = pick("val_cross_entropy"), pick("val_accuracy"), pick("test_accuracy")
	if r.ValCrossEntropy != nil {
		r.Loss = *r.ValCrossEntropy
		cfg.Logf("After %d training step(s), validation cross entropy = %g", step, *r.ValCrossEntropy)
	}
	cfg.Logf("final: global step %d, %s, stale gradients dropped %d, metrics %v", step, r.Mode, r.StaleDropped, fmtMetrics(metrics))
	if cfg.ResultFile == "" {
		return nil
	}
	return writeJSON(cfg.ResultFile, r)
}

func fmtMetrics(m map[string]float64) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// writeJSON writes v to path atomically (temp file, rename).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".result-*")
	if err != nil {
		return fmt.Errorf("result file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("result file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("result file: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// waitCall waits for call, logging every WaitLogEvery what it waits for.
func waitCall(call *client.Call, cfg Config, what string) error {
	start := time.Now()
	tick := time.NewTicker(cfg.WaitLogEvery)
	defer tick.Stop()
	for {
		select {
		case <-call.Done:
			return call.Err
		case <-tick.C:
			hint := ""
			if cfg.Sync {
				hint = " (synchronous: the step completes when enough workers have pushed)"
			}
			cfg.Logf("worker %d: %s has waited %s for the ps%s", cfg.Cluster.Task.Index, what, time.Since(start).Round(time.Second), hint)
		}
	}
}
