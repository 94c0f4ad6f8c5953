// Package model defines what a worker trains: a set of named dense variables
// and a function from their current values to the gradients of a batch. The
// trainer (package trainer) pulls the values from the parameter servers, calls
// the model, and pushes the gradients back; the model itself knows nothing of
// the network.
//
// A Model is used by one goroutine at a time.
package model

import (
	"errors"
	"github.com/paramserv/paramserv/internal/progress"

	"github.com/paramserv/paramserv/internal/optim"
)

// Variable describes one dense variable: its name (unique in the model) and
// its shape, row-major. Its size is the product of the shape.
type Variable struct {
	Name  string
	Shape []int
	// Optimizer, if set, is the update rule the ps apply to this variable
	// instead of the job's.
	Optimizer *optim.Config
}

// Size is the number of float32 elements of v.
func (v Variable) Size() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// Params maps a variable name to its flat, row-major values.
type Params map[string][]float32

// NewParams allocates zeroed values for vars.
func NewParams(vars []Variable) Params {
	p := make(Params, len(vars))
	for _, v := range vars {
		p[v.Name] = make([]float32, v.Size())
	}
	return p
}

// Model is the worker-side half of a training job.
type Model interface {
	// Variables lists the dense variables, in a fixed order.
	Variables() []Variable
	// Init returns the initial values of every variable. Only the chief
	// calls it; the same seed gives the same values.
	Init(seed int64) Params
	// ComputeGradients reads the worker's next batch, computes the loss at
	// params and writes the gradient of every variable into grads (which
	// has the same shapes and may hold old values: overwrite them).
	ComputeGradients(params, grads Params) (loss float64, err error)
	// Progress is the line logged every --steps_to_validate local steps,
	// e.g. "step: 100, weight: 1.98, bias: 9.7, loss: 0.11". localStep counts
	// this worker's own steps, globalStep the cluster's applied updates.
	Progress(localStep, globalStep int64, params Params, loss float64) string
	// Evaluate computes the final metrics at params (the chief calls it
	// once at the end); they go into the log and the result file.
	Evaluate(params Params) (map[string]float64, error)
}

// Config is what every model constructor receives.
type Config struct {
	Worker      int    // this worker's index
	NumWorkers  int    // number of workers
	Seed        int64  // base seed; each worker derives its own
	BatchSize   int    // examples per batch
	HiddenUnits int    // hidden layer width (MLP)
	DataDir     string // where dataset files live
	Dataset     string // dataset name when a model serves several (mnist, fashion-mnist)

	// Sparse models.
	TrainData, TestData string // comma-separated files or directories
	InputFormat         string // "libsvm" or "criteo"
	NumFeatures         uint64 // libsvm: keys must be below this (0: no bound)
	IntFields           int    // criteo: integer fields (with CatFields both 0: 13 and 26)
	CatFields           int    // criteo: categorical fields
	SkipBadLines        bool   // skip and count malformed lines instead of failing
	MinCount            int64  // sparse tables: admission threshold
	EvictAfterSteps     int64  // sparse tables: eviction of idle rows
	// ShuffleBuffer > 0 streams the training files (sparse_lr): rows are
	// read in the background, pass after pass, and shuffled within a
	// buffer of this many rows instead of loading the whole part.
	ShuffleBuffer int
	// ValidationData (sparse_lr): files the chief scores every
	// --steps_to_validate local steps; never a training or test file.
	ValidationData string
	// Epochs > 0 ends the training data after this many passes over the
	// worker's part: NextBatch then returns ErrEndOfData (sparse_lr).
	// 0: no end, the data is read pass after pass until --train_steps.
	Epochs int
	// Logf receives the model's own log lines (data loaded, skipped lines); nil discards.
	Logf func(format string, args ...any)
	// LoadProgress, if set, is told how far the loading of a data file has
	// come (sparse_lr: data is "training", "validation" or "test"), as the
	// model's progress lines say it, for metrics.
	LoadProgress func(data string, u progress.Update)
	// Stop, if not nil, is closed when the process is told to stop: a load
	// of data files in progress gives up (progress.ErrStopped) rather than
	// read to the end first (sparse_lr).
	Stop <-chan struct{}
}

// Table describes a sparse table: rows of Dim float32 keyed by uint64 ids,
// created on first touch and sharded across the ps by a hash of the key.
type Table struct {
	Name string
	Dim  int
	// Init is "zeros" (the default) or "normal" (truncated normal of
	// InitStddev, a pure function of Seed and the key).
	Init       string
	InitStddev float64
	Seed       uint64
	// MinCount admits a key only once it has been seen this many times
	// (0 or 1: at once); EvictAfterSteps drops rows not touched for that many
	// global steps (0: never).
	MinCount        int64
	EvictAfterSteps int64
	// Optimizer, if set, is the update rule the ps apply to this table's
	// rows instead of the job's.
	Optimizer *optim.Config
}

// ErrEndOfData is what NextBatch returns once the worker's data has ended
// (after Config.Epochs passes): the worker is done, as one that reached
// --train_steps.
var ErrEndOfData = errors.New("end of the training data")

// SparseModel is a Model whose batches also read and update rows of sparse
// tables. The trainer pulls the rows of the keys a batch touches along with
// the dense variables, and pushes their gradients back.
type SparseModel interface {
	Model
	// Tables lists the sparse tables, in a fixed order.
	Tables() []Table
	// NextBatch reads the next batch and returns, for each table (in the
	// order of Tables), the distinct keys it touches. The slices stay valid
	// until the call after next, so the trainer can push one batch's
	// gradients while it pulls the next batch's rows. Once the data has
	// ended (Config.Epochs passes) it returns ErrEndOfData; the batch
	// before may hold fewer than BatchSize examples.
	NextBatch() ([][]uint64, error)
	// SparseGradients computes the loss of the batch NextBatch last returned,
	// at the dense params and the rows of its keys (rows[t] holds
	// len(keys[t])*Dim values), and writes the dense gradients into grads
	// and the row gradients into rowGrads (shaped like rows).
	SparseGradients(params, grads Params, rows, rowGrads [][]float32) (loss float64, err error)
	// EvaluateSparse computes the final metrics; lookup reads rows of table
	// t (index into Tables) for keys into out.
	EvaluateSparse(params Params, lookup func(t int, keys []uint64, out []float32) error) (map[string]float64, error)
}

// TrainingEnder is a Model that holds memory only its training needs (a
// loaded training set) and can give it back once the worker has trained:
// the trainer calls EndTraining after its last step and before the final
// evaluation, so that the test data the evaluation loads is not held beside
// the training data. It reports whether it let go of anything (the trainer
// then has the memory collected and returned to the system). After it the
// model is only evaluated.
type TrainingEnder interface {
	EndTraining() bool
}

// SparseReadAhead is a SparseModel whose batches the trainer may read one
// ahead of the batch it computes: in asynchronous modes it pulls the rows
// of batch t+1 while it computes batch t (the overlap of communication
// with compute). Both batches stay held, as NextBatch's keys do; after
// NextBatch returned ErrEndOfData, SparseGradients still computes the last
// batch it returned.
type SparseReadAhead interface {
	SparseModel
	// PrevSparseGradients is SparseGradients of the batch NextBatch
	// returned before the one it returned last.
	PrevSparseGradients(params, grads Params, rows, rowGrads [][]float32) (loss float64, err error)
}
