package paramserv

import (
	"context"
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/trainer"
)

// Model is a model of your own that the built-in training loop runs (Run),
// with everything the built-in models get: the chief's initialisation,
// synchronous or asynchronous steps, recovery when a ps dies, checkpoints,
// progress lines, the final evaluation and the result file.
type Model interface {
	// Variables lists the dense variables, in a fixed order.
	Variables() []Variable
	// Init returns the initial values of every variable. Only the chief
	// calls it; the same seed gives the same values.
	Init(seed int64) Params
	// ComputeGradients reads the worker's next batch, computes the loss at
	// params and writes the gradient of every variable into grads (which
	// may hold old values: overwrite them).
	ComputeGradients(params, grads Params) (loss float64, err error)
	// Progress is the line logged every StepsToValidate local steps.
	Progress(localStep, globalStep int64, params Params, loss float64) string
	// Evaluate computes the final metrics at params; the chief calls it
	// once at the end, and they go to the log and the result file.
	Evaluate(params Params) (map[string]float64, error)
}

// SparseModel is a Model with sparse tables (embeddings, the weights of a
// sparse logistic regression): a Model that also has these methods is run
// through them. Each step the loop pulls the dense variables together with
// the rows of the keys the batch touches, and pushes the dense gradients
// together with the rows' gradients, as one push of the worker's step; the
// rows of the next batch are pulled in the same round trip. Run then calls
// NextBatch, SparseGradients and EvaluateSparse in place of
// ComputeGradients and Evaluate, which a sparse model may leave returning
// an error. Checkpoints hold the tables' rows, and recovery rolls them back
// with the dense variables.
type SparseModel interface {
	Model
	// Tables lists the sparse tables, in a fixed order: rows of Dim floats
	// with their initializer, admission and eviction.
	Tables() []Table
	// NextBatch reads the next batch and returns, for each table in the
	// order of Tables, the distinct keys the batch touches. The slices must
	// stay valid (unchanged) until the call after next: the loop pushes one
	// batch's row gradients while it pulls the next batch's rows. Once the
	// worker's data has ended it returns ErrEndOfData, then and on every
	// later call: the worker is done, as one at TrainSteps.
	NextBatch() (keys [][]uint64, err error)
	// SparseGradients computes the loss of the batch NextBatch last
	// returned, at params and the rows of its keys:
	// rows[t] holds the rows of that batch's keys of table t
	// (len(keys[t])×Dim values, row i for keys[t][i]); it writes the dense
	// gradients into grads and the rows' gradients into rowGrads (shaped
	// like rows, zeroed before the call).
	SparseGradients(params, grads Params, rows, rowGrads [][]float32) (loss float64, err error)
	// EvaluateSparse computes the final metrics at params; lookup reads the
	// rows of keys (distinct) of table t (an index into Tables) into out
	// (len(keys)×Dim values). The chief calls it once at the end.
	EvaluateSparse(params Params, lookup func(t int, keys []uint64, out []float32) error) (map[string]float64, error)
}

// SparseReadAhead is a SparseModel that can hold two batches at once, so
// that Run overlaps each step's round trip with the compute: while the
// worker computes batch t, one call pushes the gradients of batch t-1 and
// pulls the rows of batch t+1 (read before batch t is computed), as the
// built-in sparse_lr does. A SparseModel without it trains with each round
// trip between two computes.
//
// Run overlaps in asynchronous training (not with Sync) with one worker:
// each batch's rows then miss one push, that of the batch before, still
// in flight when they are pulled. With more workers each would miss the
// others' pushes too, which costs the built-in models accuracy, so they
// train without the overlap unless RunConfig.Overlap is OverlapOn.
//
// The loop calls the model from one goroutine at a time, in this order:
// NextBatch (batch 0), NextBatch (batch 1), PrevSparseGradients (batch 0),
// NextBatch (batch 2), PrevSparseGradients (batch 1), and so on. What the
// model must keep: the keys and the examples of the last two batches
// NextBatch returned, unchanged until the call after next (the keys'
// contract in SparseModel). Once NextBatch has returned ErrEndOfData, the
// loop computes the last batch it returned with SparseGradients. A
// recovery (a ps died) does not change this order: the loop goes on with
// the batches it had read, computed at the restored values.
type SparseReadAhead interface {
	SparseModel
	// PrevSparseGradients is SparseGradients of the batch NextBatch
	// returned before the one it returned last: rows and rowGrads are
	// shaped by that batch's keys.
	PrevSparseGradients(params, grads Params, rows, rowGrads [][]float32) (loss float64, err error)
}

// ErrEndOfData is what a SparseModel's NextBatch returns once the worker's
// data has ended (after the passes over it the model makes).
var ErrEndOfData = model.ErrEndOfData

// ModelConfig is what a model's constructor learns of its place in the
// job: its worker's index (a worker reads its own part of the data) and
// the job's seed.
type ModelConfig struct {
	Worker, NumWorkers int
	Seed               int64
}

// RunConfig is a task of a job whose workers run a Model of your own. Every
// task of the job (ps and workers) gets the same one; TF_CONFIG says which
// task this is.
type RunConfig struct {
	// TFConfig is the cluster and this task in TF_CONFIG's JSON form; ""
	// reads the environment variable TF_CONFIG.
	TFConfig string
	// Name is the model's name in the log and the result file.
	Name string
	// NewModel builds the model of one worker.
	NewModel func(ModelConfig) (Model, error)

	Optimizer           Optimizer
	Sync                bool
	ReplicasToAggregate int   // sync: 0 means every worker
	MaxStaleness        int64 // async: 0 means no bound
	// Overlap chooses whether a worker computes its next step while the
	// last one's round trip is in flight (asynchronous training only; see
	// Overlap). The zero value, OverlapAuto, overlaps with one worker.
	Overlap Overlap

	// TrainSteps ends training once the global step reaches it;
	// StepsToValidate is how often a worker logs its Progress line
	// (100 if 0); Seed is the model's seed.
	TrainSteps, StepsToValidate, Seed int64
	// BatchSize is the examples one ComputeGradients reads, for the
	// result's examples/s (1 if 0).
	BatchSize int

	// CheckpointDir, if set, is where the chief saves every SaveSteps
	// global steps (or every 10 minutes if 0) and at the end, and where a
	// restarted ps restores from.
	CheckpointDir string
	SaveSteps     int64
	// ResultFile, if set, is where the chief writes the JSON summary:
	// global step, mode, loss, the model's metrics, examples/s.
	ResultFile string

	StartupTimeout, RecoveryTimeout time.Duration
	Logf                            func(format string, args ...any)
}

// Run runs this process's task of the job: a ps until every worker is
// done, or a worker training its Model until the global step reaches
// TrainSteps, then (the chief) evaluating it and writing the result.
func Run(ctx context.Context, cfg RunConfig) error {
	cl, err := clusterOf(cfg.TFConfig)
	if err != nil {
		return err
	}
	if cfg.TrainSteps <= 0 {
		return fmt.Errorf("paramserv: TrainSteps %d: want > 0", cfg.TrainSteps)
	}
	if cfg.NewModel == nil && cl.Task.Job == cluster.JobWorker {
		return fmt.Errorf("paramserv: RunConfig.NewModel is nil: a worker needs its model")
	}
	name := cfg.Name
	if name == "" {
		name = "custom"
	}
	overlap, err := cfg.Overlap.trainer()
	if err != nil {
		return err
	}
	if cl.Task.Job == cluster.JobPS {
		return trainer.RunPS(ctx, trainer.PSConfig{PSConfig: replication.PSConfig{
			Cluster: cl, CheckpointDir: cfg.CheckpointDir, StartupTimeout: cfg.StartupTimeout, Logf: cfg.Logf,
		}})
	}
	tc := trainer.Config{
		Config: lifecycle.Config{
			Cluster:   cl,
			Optimizer: cfg.Optimizer.config(),
			Sync:      cfg.Sync, ReplicasToAggregate: cfg.ReplicasToAggregate, MaxStaleness: cfg.MaxStaleness,
			CheckpointDir: cfg.CheckpointDir, SaveSteps: cfg.SaveSteps,
			StartupTimeout: cfg.StartupTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf,
		},
		Model:      name,
		Data:       model.Config{Seed: cfg.Seed, BatchSize: max(cfg.BatchSize, 1)},
		Overlap:    overlap,
		TrainSteps: cfg.TrainSteps, StepsToValidate: cfg.StepsToValidate, ResultFile: cfg.ResultFile,
		NewModel: func(c model.Config) (model.Model, error) {
			m, err := cfg.NewModel(ModelConfig{Worker: c.Worker, NumWorkers: c.NumWorkers, Seed: c.Seed})
			if err != nil {
				return nil, err
			}
			if m == nil {
				return nil, fmt.Errorf("paramserv: RunConfig.NewModel returned no Model and no error for worker %d", c.Worker)
			}
			if ra, ok := m.(SparseReadAhead); ok {
				return readAheadAdapter{sparseAdapter{adapter{m}, ra}, ra}, nil
			}
			if sm, ok := m.(SparseModel); ok {
				return sparseAdapter{adapter{m}, sm}, nil
			}
			return adapter{m}, nil
		},
	}
	if tc.CheckpointDir != "" && tc.SaveSteps <= 0 {
		tc.SaveEvery = 10 * time.Minute
	}
	return trainer.RunWorker(ctx, tc)
}

// Overlap is RunConfig.Overlap: whether a worker computes step t+1 while
// the round trip of step t (the push of its gradients and the pull of the
// next values) is in flight. It applies to asynchronous training only:
// synchronous training computes each step at the values of the step
// before, and never overlaps. Overlapping makes every gradient one round
// of pushes staler (its worker's own last push and one of each other
// worker's), so under MaxStaleness it is used only when the bound is at
// least 2×workers−1 steps. A dense Model overlaps by itself; a
// SparseModel must also be a SparseReadAhead.
type Overlap int

const (
	// OverlapAuto overlaps when the job has one worker, where the one step
	// of staleness it adds left the built-in models' accuracy within the
	// spread of seeds; with two MNIST workers it cost 1.7 points.
	OverlapAuto Overlap = iota
	// OverlapOn overlaps whatever the number of workers.
	OverlapOn
	// OverlapOff never overlaps: each round trip lies between two
	// computes.
	OverlapOff
)

// String returns auto, on or off (paramserv train's --overlap says auto,
// true or false).
func (o Overlap) String() string {
	switch o {
	case OverlapAuto:
		return "auto"
	case OverlapOn:
		return "on"
	case OverlapOff:
		return "off"
	}
	return fmt.Sprintf("Overlap(%d)", int(o))
}

func (o Overlap) trainer() (trainer.Overlap, error) {
	switch o {
	case OverlapAuto:
		return trainer.OverlapAuto, nil
	case OverlapOn:
		return trainer.OverlapOn, nil
	case OverlapOff:
		return trainer.OverlapOff, nil
	}
	return 0, fmt.Errorf("paramserv: RunConfig.Overlap %v: want OverlapAuto, OverlapOn or OverlapOff", o)
}

// adapter runs a public Model as the trainer's.
type adapter struct{ m Model }

func (a adapter) Variables() []model.Variable { return modelVariables(a.m.Variables()) }

func (a adapter) Init(seed int64) model.Params { return model.Params(a.m.Init(seed)) }

func (a adapter) ComputeGradients(params, grads model.Params) (float64, error) {
	return a.m.ComputeGradients(Params(params), Params(grads))
}

func (a adapter) Progress(local, global int64, params model.Params, loss float64) string {
	return a.m.Progress(local, global, Params(params), loss)
}

func (a adapter) Evaluate(params model.Params) (map[string]float64, error) {
	return a.m.Evaluate(Params(params))
}

// sparseAdapter runs a public SparseModel as the trainer's.
type sparseAdapter struct {
	adapter
	sm SparseModel
}

func (a sparseAdapter) Tables() []model.Table { return modelTables(a.sm.Tables()) }

func (a sparseAdapter) NextBatch() ([][]uint64, error) { return a.sm.NextBatch() }

func (a sparseAdapter) SparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return a.sm.SparseGradients(Params(params), Params(grads), rows, rowGrads)
}

func (a sparseAdapter) EvaluateSparse(params model.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	return a.sm.EvaluateSparse(Params(params), lookup)
}

// readAheadAdapter runs a public SparseReadAhead as the trainer's, which
// then overlaps its round trips with the compute.
type readAheadAdapter struct {
	sparseAdapter
	ra SparseReadAhead
}

var _ model.SparseReadAhead = readAheadAdapter{}

func (a readAheadAdapter) PrevSparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return a.ra.PrevSparseGradients(Params(params), Params(grads), rows, rowGrads)
}
