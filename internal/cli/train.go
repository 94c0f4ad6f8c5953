// Package cli turns command lines into configurations and runs them: the
// subcommands of the paramserv binary. Each subcommand returns an exit
// status: 0 for success, 1 for a failure while running, 2 for input the
// user must fix (a malformed flag, TF_CONFIG, a port in use).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/data/fetch"
	"github.com/paramserv/paramserv/internal/data/sparsedata"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/trainer"
	"github.com/paramserv/paramserv/internal/version"
)

// trainFlags holds the flags of `paramserv train` (and `paramserv local`,
// which passes them on to every task).
type trainFlags struct {
	fs      *flag.FlagSet
	cluster func() cluster.Flags

	model, dataDir, dataset                  string
	trainSteps, stepsToValidate, maxStale    int64
	batchSize, hiddenUnits, replicas         int
	seed                                     int64
	optimizer                                string
	lr, momentum, beta1, beta2, eps, initAcc float64
	ftrlBeta, l1, l2                         float64
	l2Shrinkage, rho, weightDecay            float64
	lrPower                                  float64 // ftrl's learning_rate_power
	centered                                 bool
	lrSchedule                               string
	nesterov, sync, psWaitForever            bool
	startupTimeout, waitLogEvery             time.Duration
	workerTimeout                            time.Duration
	splitBytes                               int
	resultFile                               string
	trainData, testData, inputFormat, fields string
	numFeatures                              uint64
	skipBad                                  bool
	minCount, evictAfter                     int64
	maxTableKeys                             int64
	checkpointDir, syncOnTimeout             string
	saveSteps                                int64
	saveEvery, recoveryTimeout, syncTimeout  time.Duration
	keep                                     int
	ignored                                  map[string]*string
	tls                                      *tlsFlags
	models                                   *modelFlags // the public-API models' own (flags_models.go)
	data                                     *dataFlags  // streamed data (flags_data.go)
	telemetry                                *telemetryFlags
	perf                                     *perfFlags
	rep                                      *replicaFlags
	validation                               *validationFlags
	ckptIncr                                 *ckptIncrFlags
	tier                                     *tierFlags
	incrPull                                 *incrPullFlags
}

// ignoredTFFlags are flags of TensorFlow's PS examples that mean nothing
// here; they are accepted with a warning so the examples' command lines run
// unchanged.
var ignoredTFFlags = []string{"num_gpus", "download_only", "existing_servers", "use_fp16", "log_device_placement"}

func defineTrainFlags(fs *flag.FlagSet) *trainFlags {
	f := &trainFlags{fs: fs, ignored: map[string]*string{}}
	f.cluster = cluster.BindFlags(fs)
	f.tls = defineTLSFlags(fs)
	f.rep = defineReplicaFlags(fs)
	fs.StringVar(&f.model, "model", "linreg", "the model to train")
	fs.StringVar(&f.dataDir, "data_dir", "", "directory of the model's data files (default: $PARAMSERV_DATA, else the cache paramserv data fetch writes to)")
	fs.StringVar(&f.dataset, "dataset", "", "dataset of the model when it has several (mnist: mnist or fashion-mnist)")
	fs.Int64Var(&f.trainSteps, "train_steps", 0, "stop when the global step reaches this")
	fs.Int64Var(&f.stepsToValidate, "steps_to_validate", 0, "log progress every this many local steps; the chief of a model with validation data (mnist) also validates and logs and summarises the metrics")
	fs.IntVar(&f.batchSize, "batch_size", 100, "examples per batch on each worker")
	fs.IntVar(&f.hiddenUnits, "hidden_units", 100, "hidden layer width (mnist)")
	fs.Int64Var(&f.seed, "seed", 1, "random seed for initial values and data order")
	fs.StringVar(&f.optimizer, "optimizer", "", "update rule run on the ps")
	fs.Float64Var(&f.lr, "learning_rate", 0, "learning rate; FTRL's alpha")
	fs.StringVar(&f.lrSchedule, "lr_schedule", "", "learning-rate schedule on the global step, e.g. exponential(decay_steps=1000,decay_rate=0.96,staircase) or warmup(steps=500)+cosine(decay_steps=10000) (docs/OPTIMIZERS.md; default constant)")
	fs.Float64Var(&f.momentum, "momentum", 0, "momentum coefficient (momentum: default 0.9; rmsprop: default 0)")
	fs.BoolVar(&f.nesterov, "use_nesterov", false, "Nesterov momentum (momentum)")
	fs.Float64Var(&f.beta1, "beta1", 0, "Adam beta1 (default 0.9)")
	fs.Float64Var(&f.beta2, "beta2", 0, "Adam beta2 (default 0.999)")
	fs.Float64Var(&f.eps, "epsilon", 0, "epsilon (adam, adamw, adadelta: default 1e-8; rmsprop 1e-10; lamb 1e-6; adagrad 0)")
	fs.Float64Var(&f.initAcc, "initial_accumulator_value", 0, "initial accumulator (adagrad, ftrl, adagrad_da, proximal_adagrad: default 0.1; rmsprop: 1)")
	fs.Float64Var(&f.ftrlBeta, "ftrl_beta", 0, "FTRL beta (default 1)")
	fs.Float64Var(&f.l1, "l1", 0, "L1 regularisation strength (ftrl, adagrad_da, proximal_sgd, proximal_adagrad)")
	fs.Float64Var(&f.l2, "l2", 0, "L2 regularisation strength (ftrl, adagrad_da, proximal_sgd, proximal_adagrad)")
	fs.Float64Var(&f.l2Shrinkage, "l2_shrinkage", 0, "FTRL L2 shrinkage regularisation strength (TF's l2_shrinkage_regularization_strength)")
	fs.Float64Var(&f.lrPower, "learning_rate_power", -0.5, "FTRL learning_rate_power, <= 0: a coordinate's rate is learning_rate * n^power over its summed squared gradients n (0: fixed)")
	fs.Float64Var(&f.rho, "rho", 0, "Adadelta rho (default 0.95), RMSProp decay (default 0.9)")
	fs.BoolVar(&f.centered, "centered", false, "RMSProp: normalise by the estimated variance of the gradient")
	fs.Float64Var(&f.weightDecay, "weight_decay", 0, "decoupled weight decay (adamw: default 0.01; lamb: default 0)")
	fs.BoolVar(&f.sync, "sync_replicas", false, "synchronous training: average replicas_to_aggregate gradients per step, drop stale ones")
	fs.IntVar(&f.replicas, "replicas_to_aggregate", 0, "gradients averaged per synchronous step (default: the number of workers; fewer makes the rest backups)")
	fs.Int64Var(&f.maxStale, "max_staleness", 0, "asynchronous training: drop gradients computed more than this many steps ago (0: no bound)")
	fs.DurationVar(&f.startupTimeout, "startup_timeout", 5*time.Minute, "give up if the ps (or the chief's initialisation) are not there after this long")
	fs.DurationVar(&f.workerTimeout, "worker_timeout", 30*time.Minute, "a ps gives up (exit 1) on a worker it has not heard from for this long while others have finished (workers never heard from: --startup_timeout); --ps_wait_forever waits forever")
	fs.DurationVar(&f.waitLogEvery, "wait_log_every", 5*time.Second, "how often a task that waits (for a peer, the chief, a synchronous step) logs what it waits for")
	fs.IntVar(&f.splitBytes, "split_bytes", 0, "split dense variables larger than this many bytes across all ps (default 4 MiB)")
	fs.StringVar(&f.resultFile, "result_file", "", "the chief writes a JSON summary of the run here")
	fs.StringVar(&f.trainData, "train_data", "", "sparse_lr: training files or directories, comma-separated (looked for under --data_dir too)")
	fs.StringVar(&f.testData, "test_data", "", "sparse_lr: test files for the final log loss, accuracy and AUC")
	fs.StringVar(&f.inputFormat, "input_format", "libsvm", "sparse_lr: libsvm (label idx:val ...) or criteo (label, integer fields, categorical fields, tab-separated)")
	fs.Uint64Var(&f.numFeatures, "num_features", 0, "sparse_lr, libsvm: feature indices must be at most this (0: no bound)")
	fs.StringVar(&f.fields, "fields", "", "sparse_lr, criteo: INT,CAT, the numbers of integer and categorical fields (default 13,26)")
	fs.BoolVar(&f.skipBad, "skip_bad_lines", false, "sparse_lr: skip and count malformed data lines instead of failing")
	fs.Int64Var(&f.minCount, "min_count", 0, "sparse tables: a key gets a row only after it has been seen this many times (0: at once)")
	fs.Int64Var(&f.evictAfter, "evict_after_steps", 0, "sparse tables: drop rows not touched for this many global steps (0: never)")
	fs.Int64Var(&f.maxTableKeys, "max_table_keys", 0, "sparse tables: the most keys (rows) each ps holds of each table; a push that would add more is refused with an error naming the table and the cap, and a pull of a key past it reads the key's initial value (0: no cap; a ps flag)")
	fs.StringVar(&f.checkpointDir, "checkpoint_dir", "", "directory of checkpoints, shared by the chief and every ps: the chief saves there, a ps restores the latest valid one at start")
	fs.Int64Var(&f.saveSteps, "save_steps", 0, "the chief saves a checkpoint every this many global steps (0: by time only)")
	f.saveEvery = 10 * time.Minute
	fs.Var(secondsValue{&f.saveEvery}, "save_model_secs", "the chief saves a checkpoint this often, in seconds (600) or as a duration (10m); 0: by steps only")
	fs.IntVar(&f.keep, "keep_checkpoints", 5, "how many complete checkpoints to keep")
	fs.DurationVar(&f.recoveryTimeout, "recovery_timeout", 5*time.Minute, "how long a worker waits for a failed ps to come back before it gives up")
	fs.DurationVar(&f.syncTimeout, "sync_timeout", 10*time.Minute, "synchronous training: how long a step waits for missing gradients (0: forever)")
	fs.StringVar(&f.syncOnTimeout, "sync_on_timeout", "fail", "synchronous training, when --sync_timeout passes: fail (name the missing workers and stop) or proceed (complete the step with the gradients that came)")
	fs.BoolVar(&f.psWaitForever, "ps_wait_forever", false, "keep the ps running after every worker has finished (TensorFlow's behaviour)")
	for _, name := range ignoredTFFlags {
		f.ignored[name] = fs.String(name, "", "accepted for TensorFlow compatibility; has no effect")
	}
	f.models = defineModelFlags(fs)
	f.telemetry = defineTelemetryFlags(fs)
	f.perf = definePerfFlags(fs)
	f.data = defineDataFlags(fs)
	f.validation = defineValidationFlags(fs)
	f.ckptIncr = defineCkptIncrFlags(fs)
	f.tier = defineTierFlags(fs)
	f.incrPull = defineIncrPullFlags(fs)
	return f
}

// set reports whether the flag was given on the command line.
func (f *trainFlags) set(name string) bool {
	found := false
	f.fs.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

// taskConfig is a task's settings from the command line: trainer.Config
// a worker's (and a standalone job's), PS a ps's. The flags both roles
// read go into both: trainer.RunPS reads PS, the others the rest.
type taskConfig struct {
	trainer.Config
	PS trainer.PSConfig
}

// config builds the task's configuration; errors are the user's to fix.
func (f *trainFlags) config(tfConfig string, logf func(string, ...any)) (taskConfig, error) {
	cl, info, err := f.lookup(tfConfig, logf)
	if err != nil {
		return taskConfig{}, err
	}
	cfg := f.baseConfig(cl, logf)
	if err := f.dataConfig(&cfg.Config); err != nil {
		return cfg, err
	}
	if err := f.checkpointConfig(&cfg.Config); err != nil {
		return cfg, err
	}
	if err := f.applyGroups(&cfg); err != nil {
		return cfg, err
	}
	catalogDefaults(&cfg.Config, info)
	if err := f.crossCheck(&cfg, cl, logf); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// lookup resolves the cluster (from the cluster flags or tfConfig) and
// the model's catalog entry, warning through logf of what is ignored.
func (f *trainFlags) lookup(tfConfig string, logf func(string, ...any)) (cluster.Config, catalog.Entry, error) {
	cl, err := cluster.Resolve(f.cluster(), tfConfig)
	if err != nil {
		return cl, catalog.Entry{}, err
	}
	for _, w := range cl.Warnings {
		logf("warning: %s", w)
	}
	for _, name := range ignoredTFFlags {
		if f.set(name) {
			logf("warning: --%s has no effect in paramserv (accepted for TensorFlow compatibility)", name)
		}
	}
	info, err := catalog.Lookup(f.model)
	if err != nil {
		return cl, info, fmt.Errorf("--model: %w", err)
	}
	return cl, info, nil
}

// baseConfig is the task's configuration from the optimizer, training
// and ps flags, before the data and the flag groups.
func (f *trainFlags) baseConfig(cl cluster.Config, logf func(string, ...any)) taskConfig {
	cfg := taskConfig{Config: trainer.Config{
		Config: lifecycle.Config{
			Cluster: cl,
			Optimizer: optim.Config{
				Name: f.optimizer, LearningRate: f.lr, Momentum: f.momentum, Nesterov: f.nesterov,
				InitialAccumulator: f.initAcc, Beta1: f.beta1, Beta2: f.beta2, Epsilon: f.eps,
				FTRLBeta: f.ftrlBeta, L1: f.l1, L2: f.l2, L2Shrinkage: f.l2Shrinkage,
				Rho: f.rho, Centered: f.centered, WeightDecay: f.weightDecay, Schedule: f.lrSchedule,
				LearningRatePower: ftrlPowerFlag(f.lrPower),
			},
			Sync:                f.sync,
			ReplicasToAggregate: f.replicas,
			MaxStaleness:        f.maxStale,
			StartupTimeout:      f.startupTimeout,
			SplitBytes:          f.splitBytes,
			Logf:                logf,
			WaitLogEvery:        f.waitLogEvery,
		},
		Model:           f.model,
		TrainSteps:      f.trainSteps,
		StepsToValidate: f.stepsToValidate,
		ResultFile:      f.resultFile,
		WorkerTimeout:   f.workerTimeout,
	}}
	cfg.PS = trainer.PSConfig{
		PSConfig: replication.PSConfig{
			Cluster: cl, CheckpointDir: f.checkpointDir, StartupTimeout: f.startupTimeout,
			WaitLogEvery: f.waitLogEvery, MaxTableKeys: int(f.maxTableKeys), Logf: logf,
		},
		PSWaitForever: f.psWaitForever, WorkerTimeout: f.workerTimeout,
	}
	return cfg
}

// dataConfig sets cfg's data from the data flags (--data_dir,
// --train_data, --fields, --input_format, ...).
func (f *trainFlags) dataConfig(cfg *trainer.Config) error {
	cfg.Data.BatchSize, cfg.Data.HiddenUnits, cfg.Data.Seed = f.batchSize, f.hiddenUnits, f.seed
	cfg.Data.DataDir, cfg.Data.Dataset = f.dataDir, f.dataset
	if cfg.Data.DataDir == "" {
		// Where paramserv data fetch writes: $PARAMSERV_DATA, else the
		// cache; --train_data=a9a/a9a is looked for there too.
		cfg.Data.DataDir, _ = fetch.DefaultDir()
	}
	cfg.Data.TrainData, cfg.Data.TestData, cfg.Data.InputFormat = f.trainData, f.testData, f.inputFormat
	cfg.Data.NumFeatures, cfg.Data.SkipBadLines = f.numFeatures, f.skipBad
	cfg.Data.MinCount, cfg.Data.EvictAfterSteps = f.minCount, f.evictAfter
	if f.fields != "" {
		a, b, ok := strings.Cut(f.fields, ",")
		ni, err1 := strconv.Atoi(strings.TrimSpace(a))
		nc, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || ni < 0 || nc < 0 || ni+nc == 0 {
			return fmt.Errorf("--fields=%q: want INT,CAT, the numbers of integer and categorical fields, e.g. 13,26", f.fields)
		}
		cfg.Data.IntFields, cfg.Data.CatFields = ni, nc
	}
	if f.inputFormat != "libsvm" && f.inputFormat != "criteo" {
		return fmt.Errorf("--input_format=%q: want libsvm or criteo", f.inputFormat)
	}
	return nil
}

// checkpointConfig sets cfg's checkpointing and recovery from their flags.
func (f *trainFlags) checkpointConfig(cfg *trainer.Config) error {
	cfg.CheckpointDir, cfg.SaveSteps, cfg.SaveEvery, cfg.KeepCheckpoints = f.checkpointDir, f.saveSteps, f.saveEvery, f.keep
	cfg.RecoveryTimeout, cfg.SyncTimeout = f.recoveryTimeout, f.syncTimeout
	switch f.syncOnTimeout {
	case "fail":
	case "proceed":
		cfg.SyncProceed = true
	default:
		return fmt.Errorf("--sync_on_timeout=%q: want fail or proceed", f.syncOnTimeout)
	}
	return nil
}

// applyGroups checks the flags' ranges and applies each flag group
// (flags_*.go) to cfg, in that order.
func (f *trainFlags) applyGroups(cfg *taskConfig) error {
	if err := f.checkRanges(); err != nil {
		return err
	}
	if err := f.checkModelFlags(); err != nil {
		return err
	}
	if err := f.telemetry.check(); err != nil {
		return err
	}
	if err := f.data.apply(&cfg.Config); err != nil {
		return err
	}
	if err := f.tier.apply(&cfg.PS, f.set); err != nil {
		return err
	}
	if err := f.ckptIncr.apply(&cfg.Config, f.set); err != nil {
		return err
	}
	f.incrPull.apply(&cfg.Config)
	if err := f.validation.apply(&cfg.Config, f.model); err != nil {
		return err
	}
	if err := f.perf.apply(&cfg.Config); err != nil {
		return err
	}
	if err := f.rep.apply(cfg); err != nil {
		return err
	}
	return f.telemetry.checkSummaries()
}

// catalogDefaults fills what the flags left at zero from the model's
// catalog entry.
func catalogDefaults(cfg *trainer.Config, info catalog.Entry) {
	if cfg.Optimizer.Name == "" {
		cfg.Optimizer.Name = info.Optimizer
	}
	if cfg.Optimizer.LearningRate == 0 {
		cfg.Optimizer.LearningRate = info.LearningRate
	}
	if cfg.TrainSteps == 0 {
		cfg.TrainSteps = info.TrainSteps
	}
	if cfg.StepsToValidate == 0 {
		cfg.StepsToValidate = info.StepsToValidate
	}
}

// crossCheck checks what no one flag decides (the cluster against the
// sync flags, the optimizer with its defaults filled in), records the
// run, and applies the TLS flags last.
func (f *trainFlags) crossCheck(cfg *taskConfig, cl cluster.Config, logf func(string, ...any)) error {
	switch {
	case f.replicas > len(cl.Spec.Workers):
		return fmt.Errorf("--replicas_to_aggregate=%d: want 1 to the number of workers (%d)", f.replicas, len(cl.Spec.Workers))
	case f.maxStale > 0 && f.sync:
		return fmt.Errorf("--max_staleness applies to asynchronous training; drop it or --sync_replicas")
	}
	cfg.ResultRecord, cfg.Version = f.record(cfg.Config), version.Get().Short()
	if _, err := optim.New(cfg.Optimizer); err != nil {
		var oe *optim.ConfigError
		if errors.As(err, &oe) {
			if flagName, ok := optimFlags[oe.Field]; ok {
				return fmt.Errorf("--%s=%v: want %s (optimizer %s)", flagName, oe.Value, oe.Want, oe.Rule)
			}
		}
		if errors.Is(err, optim.ErrSchedule) {
			return fmt.Errorf("--lr_schedule: %w", err)
		}
		return fmt.Errorf("--optimizer: %w", err)
	}
	return f.tls.apply(cfg, logf)
}

// ftrlPowerFlag is --learning_rate_power as optim.Config holds it: nil at
// the default -0.5.
func ftrlPowerFlag(p float64) *float64 {
	if p == -0.5 {
		return nil
	}
	return &p
}

// optimFlags maps optim.ConfigError's fields to the flags that set them.
var optimFlags = map[string]string{
	"learning_rate": "learning_rate", "momentum": "momentum", "initial_accumulator": "initial_accumulator_value",
	"beta1": "beta1", "beta2": "beta2", "epsilon": "epsilon", "ftrl_beta": "ftrl_beta", "l1": "l1", "l2": "l2",
	"l2_shrinkage": "l2_shrinkage", "rho": "rho", "weight_decay": "weight_decay",
	"learning_rate_power": "learning_rate_power",
}

// checkRanges refuses numeric flags outside the values that mean something,
// naming the flag and what it wants. A flag whose zero means "the
// default" (--train_steps, --learning_rate, ...) is refused at 0 only when
// given explicitly.
func (f *trainFlags) checkRanges() error {
	positive := func(name string, v int64, explicitZeroOK bool) error {
		if v < 0 || (v == 0 && f.set(name) && !explicitZeroOK) {
			return fmt.Errorf("--%s=%d: want a number > 0", name, v)
		}
		return nil
	}
	nonNegative := func(name string, v int64, what string) error {
		if v < 0 {
			return fmt.Errorf("--%s=%d: want a number >= 0 (%s)", name, v, what)
		}
		return nil
	}
	duration := func(name string, d time.Duration, zero string) error {
		switch {
		case d < 0 && zero != "":
			return fmt.Errorf("--%s=%v: want a duration >= 0 (0: %s)", name, d, zero)
		case d <= 0 && zero == "":
			return fmt.Errorf("--%s=%v: want a duration > 0", name, d)
		}
		return nil
	}
	for _, err := range []error{
		positive("train_steps", f.trainSteps, false),
		positive("steps_to_validate", f.stepsToValidate, false),
		positive("split_bytes", int64(f.splitBytes), false),
		positive("replicas_to_aggregate", int64(f.replicas), false),
		nonNegative("max_staleness", f.maxStale, "0: no bound"),
		nonNegative("min_count", f.minCount, "0: a row at once"),
		nonNegative("evict_after_steps", f.evictAfter, "0: never"),
		nonNegative("max_table_keys", f.maxTableKeys, "0: no cap"),
		nonNegative("save_steps", f.saveSteps, "0: by time only"),
		duration("startup_timeout", f.startupTimeout, ""),
		duration("worker_timeout", f.workerTimeout, ""),
		duration("wait_log_every", f.waitLogEvery, ""),
		duration("recovery_timeout", f.recoveryTimeout, ""),
		duration("sync_timeout", f.syncTimeout, "forever"),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case f.batchSize <= 0:
		return fmt.Errorf("--batch_size=%d: want a number > 0", f.batchSize)
	case f.batchSize > maxBatchSize:
		return fmt.Errorf("--batch_size=%d: want at most %d examples per batch (a batch is held in memory whole)", f.batchSize, maxBatchSize)
	case f.hiddenUnits <= 0:
		return fmt.Errorf("--hidden_units=%d: want a number > 0", f.hiddenUnits)
	case f.keep < 1:
		return fmt.Errorf("--keep_checkpoints=%d: want a number >= 1", f.keep)
	case f.lr < 0 || (f.lr == 0 && f.set("learning_rate")):
		return fmt.Errorf("--learning_rate=%v: want a number > 0", f.lr)
	}
	return nil
}

func newLogger(w io.Writer) func(string, ...any) {
	l := log.New(w, "", log.LstdFlags|log.Lmicroseconds)
	return func(format string, args ...any) { l.Printf(format, args...) }
}

// Train is `paramserv train`: run one task.
func Train(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv train", flag.ContinueOnError)
	f := defineTrainFlags(fs)
	help := func(w io.Writer) {
		fmt.Fprint(w, `Usage: paramserv train [flags]

Runs one task of a training job: a ps or a worker. The cluster comes from
--ps_hosts, --worker_hosts, --job_name and --task_index, or from the
TF_CONFIG environment variable; an explicit flag wins over TF_CONFIG, field
by field. Worker 0 is the chief.

Exit status: 0 when the task's work is done (a ps: every worker has
finished); 1 for a failure while running; 2 for input to fix; 143 or 130
(128 + the signal) when SIGTERM or SIGINT stopped it before its work was
done, which paramserv local treats as a death by signal and restarts.
`)
		printFlags(w, fs, true, nil)
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	if f.perf.standalone && !f.standaloneCluster(stderr) {
		return 2
	}
	logf := f.telemetry.logger(stderr)
	tfConfig := os.Getenv("TF_CONFIG")
	if f.perf.standalone {
		tfConfig = "" // no cluster
	}
	cfg, err := f.config(tfConfig, logf)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv train: %v\n", err)
		return 2
	}
	if cfg.ResultFile != "" && cfg.Cluster.IsChief() {
		if err := checkResultFile(cfg.ResultFile); err != nil {
			fmt.Fprintf(stderr, "paramserv train: %v\n", err)
			return 2
		}
	}
	// The ps and the chief write checkpoints; other workers never do.
	if cfg.CheckpointDir != "" && (cfg.Cluster.Task.Job == cluster.JobPS || cfg.Cluster.IsChief()) {
		if err := checkCheckpointDir(cfg.CheckpointDir); err != nil {
			fmt.Fprintf(stderr, "paramserv train: %v\n", err)
			return 2
		}
	}
	if !f.perf.standalone {
		logf("%s at %s: cluster of %d ps and %d workers; %s", cfg.Cluster.Task, cfg.Cluster.Addr(), len(cfg.Cluster.Spec.PS), len(cfg.Cluster.Spec.Workers), version.Get().Short())
		// In a pod, peers' DNS names may not resolve yet: wait, saying what
		// is awaited, up to --startup_timeout.
		if err := cfg.Cluster.WaitResolvable(ctx, cluster.WaitOptions{Timeout: cfg.StartupTimeout, TimeoutFlag: "--startup_timeout", LogEvery: cfg.WaitLogEvery, Logf: logf}); err != nil {
			var sig *SignalError
			if errors.As(context.Cause(ctx), &sig) {
				// Stopped while waiting for a peer's name: a death by
				// signal like any other before the work was done.
				logf("%s %d: %v while waiting for the cluster's host names to resolve; exiting %d", cfg.Cluster.Task.Job, cfg.Cluster.Task.Index, sig, sig.ExitCode())
				return sig.ExitCode()
			}
			logf("failed: %v", err)
			return 1
		}
	}
	program, isProgram := programs[f.model]
	stopTelemetry, err := f.telemetry.start(&cfg, f.tls.files.Any(), isProgram && !f.perf.standalone, logf)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv train: %v\n", err)
		return 2
	}
	defer stopTelemetry()
	stopProfile, err := f.perf.startProfile(cfg.Cluster.Task)
	if err != nil {
		fmt.Fprintf(stderr, "paramserv train: %v\n", err)
		return 2
	}
	defer stopProfile()
	cfg.Data.Stop = ctx.Done() // a signal ends a long load of the data too
	switch {
	case f.perf.standalone:
		err = trainer.RunStandalone(ctx, cfg.Config)
	case isProgram && cfg.Cluster.Task.Job == cluster.JobWorker:
		err = program(ctx, cfg.Config, f)
	case cfg.Cluster.Task.Job == cluster.JobPS:
		err = trainer.RunPS(ctx, cfg.PS)
	default:
		err = trainer.RunWorker(ctx, cfg.Config)
	}
	var ce *trainer.ConfigError
	var sig *SignalError
	var stopped *trainer.StoppedError
	var bad *sparsedata.InputError
	switch {
	case err != nil && errors.As(context.Cause(ctx), &sig):
		// Stopped from outside before the work was done: a death, exit
		// 128+signal, which `paramserv local` restarts like a kill (also
		// when the signal cut a load of the data short, which the model
		// reports as bad input).
		if errors.As(err, &stopped) {
			logf("%v; exiting %d", err, sig.ExitCode())
		} else {
			logf("%s %d: %v before training finished (%v); exiting %d", cfg.Cluster.Task.Job, cfg.Cluster.Task.Index, sig, err, sig.ExitCode())
		}
		return sig.ExitCode()
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "paramserv train: %v\n", err)
		return 2
	case errors.As(err, &bad):
		// The training files, found bad while streaming them: input to
		// fix, as when they are found bad while loading them at start.
		fmt.Fprintf(stderr, "paramserv train: %v\n", err)
		return 2
	case err != nil:
		logf("failed: %v", err)
		return 1
	}
	return 0
}

type clusterFlagsT = cluster.Flags

// localProbeCluster is a stand-in cluster for validating the training flags
// of `paramserv local` before any process starts.
func localProbeCluster(numPS, numWorkers int) cluster.Flags {
	f := cluster.Flags{JobName: "worker", JobNameSet: true, TaskIndexSet: true, PSHostsSet: true, WorkerHostsSet: true}
	hosts := make([]string, numPS+numWorkers)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", i+1)
	}
	f.PSHosts, f.WorkerHosts = strings.Join(hosts[:numPS], ","), strings.Join(hosts[numPS:], ",")
	return f
}

// secondsValue is a duration flag that also takes a plain number of
// seconds, as TensorFlow's --save_model_secs=60 does.
type secondsValue struct{ d *time.Duration }

func (s secondsValue) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

// maxBatchSize bounds --batch_size: a batch is allocated whole before the
// first example is read.
const maxBatchSize = 1 << 20

func (s secondsValue) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
		// A time.Duration holds about 292 years; more would wrap negative
		// (and a negative interval turns timed saves off).
		if n*float64(time.Second) >= math.MaxInt64 {
			return fmt.Errorf("want at most %d seconds (about 292 years), got %q", int64(math.MaxInt64/time.Second), v)
		}
		*s.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want seconds (60) or a duration (1m30s), got %q", v)
	}
	*s.d = d
	return nil
}

// checkCheckpointDir makes sure the checkpoint directory can be used before
// any training: it is created if missing, must be a directory, and a file
// must be creatable in it (tried for real: permission bits say nothing to
// root, and nothing of read-only mounts).
func checkCheckpointDir(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		return fmt.Errorf("--checkpoint_dir=%s: is a file, want a directory", dir)
	}
	if err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--checkpoint_dir=%s: cannot create the directory: %v", dir, err)
		}
	}
	f, err := os.CreateTemp(dir, ".paramserv-write-probe-*")
	if err != nil {
		return fmt.Errorf("--checkpoint_dir=%s: cannot write in the directory: %v", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("--checkpoint_dir=%s: cannot remove a file from the directory: %v", dir, err)
	}
	return nil
}

// modelOnlyFlags are the flags that only some models use (each model's
// catalog.Entry.Uses says which of them it reads). Such a flag given with
// a model that does not use it is refused rather than silently ignored.
var modelOnlyFlags = []string{"hidden_units", "dataset", "data_dir", "train_data", "test_data", "input_format",
	"num_features", "fields", "skip_bad_lines", "min_count", "evict_after_steps", "dim", "reg", "deep_scale",
	"dense_optimizer", "dense_learning_rate", "shuffle_buffer", "validation_data"}

// checkModelFlags refuses a flag the chosen model does not use, naming the
// models that do, and the update-rule flags (updateRuleFlags) given to a
// public model that picks its own.
func (f *trainFlags) checkModelFlags() error {
	e, err := catalog.Lookup(f.model)
	if err != nil {
		return nil
	}
	uses := e.Uses
	for _, name := range modelOnlyFlags {
		if !f.set(name) || slices.Contains(uses, name) {
			continue
		}
		var users []string
		for _, m := range catalog.Names() {
			if u, _ := catalog.Lookup(m); slices.Contains(u.Uses, name) {
				users = append(users, m)
			}
		}
		return fmt.Errorf("--%s: --model=%s does not use it (it is for %s); drop it or choose another --model", name, f.model, strings.Join(users, ", "))
	}
	return f.checkUpdateRuleFlags()
}

// record is what the result file keeps of the command line so that the run
// can be reproduced: every flag but the cluster's and TensorFlow's no-ops,
// with the model's defaults filled in.
func (f *trainFlags) record(cfg trainer.Config) map[string]string {
	r := map[string]string{}
	f.fs.VisitAll(func(fl *flag.Flag) {
		if flagGroups[fl.Name] == groupCluster || slices.Contains(ignoredTFFlags, fl.Name) {
			return
		}
		r[fl.Name] = fl.Value.String()
	})
	r["train_steps"] = strconv.FormatInt(cfg.TrainSteps, 10)
	r["steps_to_validate"] = strconv.FormatInt(cfg.StepsToValidate, 10)
	r["optimizer"] = cfg.Optimizer.Name
	r["learning_rate"] = strconv.FormatFloat(cfg.Optimizer.LearningRate, 'g', -1, 64)
	// The rule's hyper-parameters as they are in force: a flag left at 0
	// means "the rule's default", which the record writes out (Adam's
	// beta1 0.9, not 0).
	o := optim.Resolved(cfg.Optimizer)
	for flagName, v := range map[string]float64{
		"momentum": o.Momentum, "initial_accumulator_value": o.InitialAccumulator, "beta1": o.Beta1,
		"beta2": o.Beta2, "epsilon": o.Epsilon, "ftrl_beta": o.FTRLBeta, "rho": o.Rho, "weight_decay": o.WeightDecay,
	} {
		if _, ok := r[flagName]; ok {
			r[flagName] = strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return r
}

// checkResultFile makes sure the result file can be written before any
// training: its directory must exist and take a new file, and the path
// must not be a directory.
func checkResultFile(path string) error {
	return checkOutFile("result_file", path)
}
