// Package mlp is the model of TensorFlow's "distributed MNIST" example: a
// multilayer perceptron with one hidden ReLU layer and a softmax output,
// trained with cross-entropy on MNIST or Fashion-MNIST.
//
//	logits = relu(x·hid_w + hid_b)·sm_w + sm_b      x: batch×784
//	loss   = mean over the batch of −log softmax(logits)[label]
//
// Its four variables are hid_w [784, hidden], hid_b [hidden], sm_w
// [hidden, 10] and sm_b [10]. Init draws the weights as the example does,
// from a normal distribution truncated at two standard deviations, with
// standard deviation 1/28 (= 1/√784) for hid_w and 1/√hidden for sm_w; the
// biases start at zero.
//
// The worker's arithmetic is float32, as the parameters travel
// (model.Params): ComputeGradients reads the parameters and writes the
// gradients in place, running the forward and backward passes written out
// in net.go on a float32 matrix multiply (sgemm); the softmax and the loss
// are float64. The matrix multiply is the package's own float32 kernel by
// default (the static binary: Go assembly with AVX2 and FMA on amd64 CPUs
// that have them, pure Go elsewhere or under -tags purego), or OpenBLAS
// through cgo when built with -tags openblas (Debian's libopenblas0-pthread,
// run on one thread unless OPENBLAS_NUM_THREADS says otherwise): BLAS names
// the one built in. The
// float32 gradients are checked against the float64 code the model used
// before, and against finite differences. A Model reuses its buffers from
// step to step.
//
// A Model is used by one goroutine at a time (as model.Model says). Several
// Models may share one loaded *mnist.Data (NewWithData), which is read-only.
package mlp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/paramserv/paramserv/internal/data/fetch"
	"github.com/paramserv/paramserv/internal/data/mnist"
	"github.com/paramserv/paramserv/internal/model"
)

// Variable names, as in the TensorFlow example.
const (
	HidW = "hid_w"
	HidB = "hid_b"
	SmW  = "sm_w"
	SmB  = "sm_b"
)

// Defaults for the zero values of model.Config.
const (
	DefaultBatchSize   = 100
	DefaultHiddenUnits = 100
	DefaultDataset     = "mnist"
)

// ErrParams reports parameters or gradients of the wrong names or sizes.
var ErrParams = errors.New("mlp: bad parameters")

// evalRows is how many examples Loss and Evaluate process at a time.
const evalRows = 1000

// Variables lists the four variables of an MLP with hidden units.
func Variables(hidden int) []model.Variable {
	return []model.Variable{
		{Name: HidW, Shape: []int{inputs, hidden}},
		{Name: HidB, Shape: []int{hidden}},
		{Name: SmW, Shape: []int{hidden, classes}},
		{Name: SmB, Shape: []int{classes}},
	}
}

// Init returns the initial values of an MLP with hidden units: weights from
// a truncated normal (redrawn beyond two standard deviations), standard
// deviation 1/28 for hid_w and 1/√hidden for sm_w; biases zero. The same seed
// gives the same values.
func Init(hidden int, seed int64) model.Params {
	p := model.NewParams(Variables(hidden))
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6d6c70)) // "mlp"
	truncatedNormal(rng, p[HidW], 1.0/28)
	truncatedNormal(rng, p[SmW], 1/math.Sqrt(float64(hidden)))
	return p
}

// truncatedNormal fills v as tf.truncated_normal does: normal values with
// the given standard deviation, those beyond two of them drawn again.
func truncatedNormal(rng *rand.Rand, v []float32, stddev float64) {
	for i := range v {
		z := rng.NormFloat64()
		for math.Abs(z) > 2 {
			z = rng.NormFloat64()
		}
		v[i] = float32(z * stddev)
	}
}

var _ model.Model = (*Model)(nil)

// Model is the MLP as a model.Model, training on one worker's part of the
// training set. A Model is used by one goroutine at a time; its buffers are
// reused from call to call.
type Model struct {
	worker  int
	hidden  int
	data    *mnist.Data    // shared, read-only
	batches *mnist.Batches // over this worker's partition

	w, g   *weights   // views of the caller's parameters and gradients
	ws     *workspace // batch-sized
	labels []uint8    // the batch's labels
	evalWS *workspace // evalRows-sized, made by the first Evaluate
}

// SetParallel lets the default build's matrix multiply spread each large
// product of a training step over GOMAXPROCS goroutines (rows of the
// product each, with the bits of the serial one), for a process that has
// the machine's cores to itself; by default it runs on the calling
// goroutine, as a worker that shares the cores with its ps should. The OpenBLAS build runs on OPENBLAS_NUM_THREADS threads (one
// unless set) either way.
func (m *Model) SetParallel(on bool) { m.ws.s.parallel = on }

// New loads the dataset cfg names and returns the model of worker
// cfg.Worker of cfg.NumWorkers. cfg.DataDir is the folder holding the four
// files of cfg.Dataset ("mnist", the default, or "fashion-mnist"), or its
// parent holding a folder of that name; empty means fetch.DefaultDir().
// Zero BatchSize and HiddenUnits mean 100 each; zero NumWorkers means 1.
func New(cfg model.Config) (*Model, error) {
	ds := cfg.Dataset
	if ds == "" {
		ds = DefaultDataset
	}
	if ds != "mnist" && ds != "fashion-mnist" {
		return nil, fmt.Errorf("mlp: unknown dataset %q: want mnist or fashion-mnist", cfg.Dataset)
	}
	root := cfg.DataDir
	if root == "" {
		var err error
		if root, err = fetch.DefaultDir(); err != nil {
			return nil, fmt.Errorf("mlp: %w", err)
		}
	}
	dir, err := mnist.Dir(root, ds)
	if err != nil {
		return nil, fmt.Errorf("mlp: %w", err)
	}
	data, err := mnist.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("mlp: loading %s: %w", ds, err)
	}
	return NewWithData(cfg, data)
}

// NewWithData is New with the data already loaded, so that the workers of an
// in-process cluster can share one copy. cfg.DataDir and cfg.Dataset are
// ignored.
func NewWithData(cfg model.Config, data *mnist.Data) (*Model, error) {
	if data == nil || data.Train == nil || data.Validation == nil || data.Test == nil {
		return nil, errors.New("mlp: NewWithData needs the training, validation and test sets")
	}
	batch, hidden, workers := cfg.BatchSize, cfg.HiddenUnits, cfg.NumWorkers
	if batch == 0 {
		batch = DefaultBatchSize
	}
	if hidden == 0 {
		hidden = DefaultHiddenUnits
	}
	if workers == 0 {
		workers = 1
	}
	if batch < 0 || hidden < 0 {
		return nil, fmt.Errorf("mlp: batch size %d and hidden units %d: want positive numbers", batch, hidden)
	}
	part, err := data.Train.Partition(cfg.Worker, workers)
	if err != nil {
		return nil, fmt.Errorf("mlp: %w", err)
	}
	if cfg.BatchSize > part.Len() { // a batch size given, not the default
		return nil, fmt.Errorf("mlp: --batch_size=%d is larger than worker %d's part of the training data (%d of %d examples over %d workers)", batch, cfg.Worker, part.Len(), data.Train.Len(), workers)
	}
	// Each worker shuffles its part with its own stream.
	seed := uint64(cfg.Seed) ^ (uint64(cfg.Worker)+1)*0x9e3779b97f4a7c15
	batches, err := mnist.NewBatches(part, batch, seed)
	if err != nil {
		return nil, fmt.Errorf("mlp: %w", err)
	}
	return &Model{
		worker:  cfg.Worker,
		hidden:  hidden,
		data:    data,
		batches: batches,
		w:       newWeights(hidden),
		g:       newWeights(hidden),
		ws:      newWorkspace(batch, hidden),
		labels:  make([]uint8, batch),
	}, nil
}

// Variables lists hid_w, hid_b, sm_w and sm_b.
func (m *Model) Variables() []model.Variable { return Variables(m.hidden) }

// Init returns the initial values; see the package-level Init.
func (m *Model) Init(seed int64) model.Params { return Init(m.hidden, seed) }

// Data is the dataset the model trains and evaluates on.
func (m *Model) Data() *mnist.Data { return m.data }

// ComputeGradients draws the worker's next batch and writes into grads the
// gradient of the batch's mean cross-entropy at params, which it returns.
func (m *Model) ComputeGradients(params, grads model.Params) (float64, error) {
	if err := m.w.load(params); err != nil {
		return 0, err
	}
	if err := m.g.bindGrads(grads); err != nil {
		return 0, err
	}
	idx := m.batches.Next()
	m.ws.gather(m.batches.Set(), idx, m.labels)
	return m.ws.lossGrad(m.w, m.labels, len(idx), m.g), nil
}

// Progress is the example's log line with the batch's cross entropy:
// "Worker 0: training step 100 done (global step: 187), loss 0.2345".
func (m *Model) Progress(localStep, globalStep int64, _ model.Params, loss float64) string {
	return fmt.Sprintf("Worker %d: training step %d done (global step: %d), loss %.4f", m.worker, localStep, globalStep, loss)
}

// Validate returns val_cross_entropy and val_accuracy on the validation set
// (the first 5,000 images of the training file, which no worker trains on).
func (m *Model) Validate(params model.Params) (map[string]float64, error) {
	if err := m.w.load(params); err != nil {
		return nil, err
	}
	if m.evalWS == nil {
		m.evalWS = newWorkspace(evalRows, m.hidden)
	}
	vce, vacc := evaluate(m.evalWS, m.w, m.data.Validation.Images, m.data.Validation.Labels)
	return map[string]float64{"val_cross_entropy": vce, "val_accuracy": vacc}, nil
}

// Evaluate returns val_cross_entropy and val_accuracy on the validation set
// and test_cross_entropy and test_accuracy on the test set.
func (m *Model) Evaluate(params model.Params) (map[string]float64, error) {
	if err := m.w.load(params); err != nil {
		return nil, err
	}
	if m.evalWS == nil {
		m.evalWS = newWorkspace(evalRows, m.hidden)
	}
	vce, vacc := evaluate(m.evalWS, m.w, m.data.Validation.Images, m.data.Validation.Labels)
	tce, tacc := evaluate(m.evalWS, m.w, m.data.Test.Images, m.data.Test.Labels)
	return map[string]float64{
		"val_cross_entropy":  vce,
		"val_accuracy":       vacc,
		"test_cross_entropy": tce,
		"test_accuracy":      tacc,
	}, nil
}

// Loss returns the mean cross-entropy and the accuracy of params on the
// examples x (len(labels)×784 pixels in [0, 1], row-major) with their labels.
// It needs no Model, so a single-process baseline can use it.
func Loss(params model.Params, x []float32, labels []uint8) (crossEntropy, accuracy float64, err error) {
	if len(labels) == 0 || len(x) != len(labels)*inputs {
		return 0, 0, fmt.Errorf("mlp: %d pixels for %d labels: want %d×%d", len(x), len(labels), len(labels), inputs)
	}
	for i, l := range labels {
		if l >= classes {
			return 0, 0, fmt.Errorf("mlp: label %d of example %d: want 0 to %d", l, i, classes-1)
		}
	}
	hidden, err := hiddenOf(params)
	if err != nil {
		return 0, 0, err
	}
	w := newWeights(hidden)
	if err := w.load(params); err != nil {
		return 0, 0, err
	}
	ce, acc := evaluate(newWorkspace(min(evalRows, len(labels)), hidden), w, x, labels)
	return ce, acc, nil
}

// evaluate runs the forward pass over x and labels in chunks of ws.rows.
func evaluate(ws *workspace, w *weights, x []float32, labels []uint8) (crossEntropy, accuracy float64) {
	var sum float64
	var correct int
	for lo := 0; lo < len(labels); lo += ws.rows {
		n := min(ws.rows, len(labels)-lo)
		s, c := ws.forward(w, x[lo*inputs:(lo+n)*inputs], labels[lo:lo+n], n)
		sum += s
		correct += c
	}
	n := float64(len(labels))
	return sum / n, float64(correct) / n
}
