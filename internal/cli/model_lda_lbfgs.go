package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/models/lbfgs"
	"github.com/paramserv/paramserv/models/lda"
)

// dataFile finds a --train_data or --test_data file: as given, or under
// --data_dir.
func dataFile(flag, name, dataDir string) (string, error) {
	if name == "" {
		return "", &trainer.ConfigError{Err: fmt.Errorf("--%s: want the data file", flag)}
	}
	cands := []string{name}
	if dataDir != "" && !filepath.IsAbs(name) {
		cands = append(cands, filepath.Join(dataDir, name))
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	return "", &trainer.ConfigError{Err: fmt.Errorf("--%s=%s: no such file (looked at %v)", flag, name, cands)}
}

// runLDA: --train_data is the LDA-C corpus (its vocab.txt beside it),
// --train_steps the Gibbs sweeps, --seed the samplers' seed.
func runLDA(ctx context.Context, c trainer.Config, f *trainFlags) error {
	if c.Sync {
		return &trainer.ConfigError{Err: fmt.Errorf("--model=lda trains asynchronously (each count delta is added; a synchronous step would average them): drop --sync_replicas")}
	}
	corpus, err := dataFile("train_data", c.Data.TrainData, c.Data.DataDir)
	if err != nil {
		return err
	}
	_, err = lda.Run(ctx, lda.Config{TFConfig: tfConfigOf(c.Cluster), Corpus: corpus, Sweeps: int(c.TrainSteps),
		Seed: c.Data.Seed, ResultFile: c.ResultFile, Logf: c.Logf, MetricsAddr: f.telemetry.programMetricsAddr()})
	return err
}

// runLBFGS: --train_data and --test_data are LIBSVM files, --num_features
// d, --train_steps the most L-BFGS iterations; it trains synchronously
// whatever --sync_replicas says (each evaluation needs every worker's sums).
func runLBFGS(ctx context.Context, c trainer.Config, f *trainFlags) error {
	if c.Data.InputFormat != "libsvm" {
		return &trainer.ConfigError{Err: fmt.Errorf("--model=logreg_lbfgs reads LIBSVM files: want --input_format=libsvm, not %q", c.Data.InputFormat)}
	}
	train, err := dataFile("train_data", c.Data.TrainData, c.Data.DataDir)
	if err != nil {
		return err
	}
	var test string
	if c.Data.TestData != "" {
		if test, err = dataFile("test_data", c.Data.TestData, c.Data.DataDir); err != nil {
			return err
		}
		if a, b := filepath.Clean(train), filepath.Clean(test); a == b {
			return &trainer.ConfigError{Err: fmt.Errorf("--train_data and --test_data are the same file %s: name a test file of its own", a)}
		}
	}
	_, err = lbfgs.Run(ctx, lbfgs.Config{TFConfig: tfConfigOf(c.Cluster), Train: train, Test: test, NumFeatures: int(c.Data.NumFeatures),
		MaxIterations: int(c.TrainSteps), ResultFile: c.ResultFile, Logf: c.Logf, MetricsAddr: f.telemetry.programMetricsAddr()})
	return err
}
