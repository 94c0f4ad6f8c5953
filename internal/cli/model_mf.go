package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/models/mf"
)

// runMF runs a worker of --model=mf (package models/mf).
func runMF(ctx context.Context, cfg trainer.Config, f *trainFlags) error {
	if f.trainData == "" || f.testData == "" {
		return &trainer.ConfigError{Err: fmt.Errorf("--model=mf: want --train_data and --test_data, ratings files such as ml-100k/u1.base and ml-100k/u1.test (under --data_dir)")}
	}
	if f.models.dim < 0 || f.models.reg < 0 {
		return &trainer.ConfigError{Err: fmt.Errorf("--dim=%d, --reg=%g: want numbers >= 0 (0: the default)", f.models.dim, f.models.reg)}
	}
	mc := mf.Config{
		TFConfig:  tfConfigOf(cfg.Cluster),
		TrainFile: underDataDir(f.dataDir, f.trainData), TestFile: underDataDir(f.dataDir, f.testData),
		Dim: f.models.dim, Reg: f.models.reg, BatchSize: f.batchSize, TrainSteps: cfg.TrainSteps,
		Optimizer: publicOptimizer(cfg), Seed: f.seed, Sync: cfg.Sync,
		CheckpointDir: cfg.CheckpointDir, SaveSteps: cfg.SaveSteps, StepsToValidate: cfg.StepsToValidate,
		ResultFile: cfg.ResultFile, StartupTimeout: cfg.StartupTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf,
		MetricsAddr: f.telemetry.programMetricsAddr(),
	}
	if _, err := mf.Train(ctx, mc); errors.Is(err, mf.ErrInput) {
		return &trainer.ConfigError{Err: err}
	} else if err != nil {
		return err
	}
	return nil
}

// underDataDir is path under dir when path is relative, dir is given and
// the file is there (as sparse_lr looks for its data), else path itself.
func underDataDir(dir, path string) string {
	if dir == "" || filepath.IsAbs(path) {
		return path
	}
	if p := filepath.Join(dir, path); exists(p) {
		return p
	}
	return path
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// publicOptimizer is the job's optimizer in the public API's form.
func publicOptimizer(cfg trainer.Config) paramserv.Optimizer {
	o := cfg.Optimizer
	return paramserv.Optimizer{Name: o.Name, LearningRate: o.LearningRate, Momentum: o.Momentum, Nesterov: o.Nesterov,
		Beta1: o.Beta1, Beta2: o.Beta2, Epsilon: o.Epsilon, InitialAccumulator: o.InitialAccumulator,
		FTRLBeta: o.FTRLBeta, L1: o.L1, L2: o.L2}
}
