package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/models/deepctr"
)

// runDeepCTR runs a worker of --model=deep_ctr (package models/deepctr).
func runDeepCTR(ctx context.Context, cfg trainer.Config, f *trainFlags) error {
	if f.trainData == "" || f.testData == "" {
		return &trainer.ConfigError{Err: fmt.Errorf("--model=deep_ctr: want --train_data (files or a synth-ctr directory) and --test_data")}
	}
	if f.models.dim < 0 {
		return &trainer.ConfigError{Err: fmt.Errorf("--dim=%d: want a number >= 0 (0: the default)", f.models.dim)}
	}
	var names []string
	for _, n := range strings.Split(f.trainData, ",") {
		names = append(names, underDataDir(f.dataDir, strings.TrimSpace(n)))
	}
	files, err := deepctr.DataFiles(strings.Join(names, ","))
	if err != nil {
		return &trainer.ConfigError{Err: err}
	}
	dc := deepctr.Config{
		TFConfig: tfConfigOf(cfg.Cluster), TrainFiles: files, TestFile: underDataDir(f.dataDir, f.testData),
		Dim: f.models.dim, DeepScale: f.models.deepScale, BatchSize: f.batchSize, TrainSteps: cfg.TrainSteps,
		MinCount: f.minCount, EvictAfterSteps: f.evictAfter,
		Optimizer: publicOptimizer(cfg), Seed: f.seed, Sync: cfg.Sync,
		DenseOptimizer: paramserv.Optimizer{Name: f.models.denseOptimizer, LearningRate: f.models.denseLearningRate},
		CheckpointDir:  cfg.CheckpointDir, SaveSteps: cfg.SaveSteps, StepsToValidate: cfg.StepsToValidate,
		ResultFile: cfg.ResultFile, StartupTimeout: cfg.StartupTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf,
		MetricsAddr: f.telemetry.programMetricsAddr(),
	}
	// An explicit 0 turns admission or eviction off (deepctr's -1); unset
	// flags leave the model's defaults.
	if f.set("min_count") && f.minCount == 0 {
		dc.MinCount = -1
	}
	if f.set("evict_after_steps") && f.evictAfter == 0 {
		dc.EvictAfterSteps = -1
	}
	if f.set("hidden_units") {
		dc.Hidden = []int{f.hiddenUnits}
	}
	if _, err := deepctr.Train(ctx, dc); errors.Is(err, deepctr.ErrInput) {
		return &trainer.ConfigError{Err: err}
	} else if err != nil {
		return err
	}
	return nil
}
