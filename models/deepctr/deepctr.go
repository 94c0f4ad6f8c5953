// Package deepctr is a deep click-through-rate model on a paramserv
// cluster, written on the public API alone (Start, PullTables,
// PushPullRows, Done) as a user would write it: Wide & Deep over
// categorical fields, such as `paramserv data synth-ctr` writes.
//
// Each field f has a sparse table on the ps, "field00" to "fieldNN", whose
// rows (keyed by a hash of the field's value) hold 1+Dim floats: a wide
// weight w, and an embedding e of Dim floats. The tables admit a key only
// once it has been seen MinCount times and evict rows not touched for
// EvictAfterSteps global steps. A row's score is
//
//	logit = b + Σ_f w_f + MLP(e_0 ‖ … ‖ e_{F-1})
//
// where the MLP (ReLU hidden layers, then one output unit) is dense
// variables on the ps. The wide part alone is sparse logistic regression;
// the output layer starts at zero, so training starts from it and the deep
// part adds what the fields' interactions explain. Everything is trained by
// the job's optimizer on the ps from the gradient of the batch's summed log
// loss; the worker's math is gonum's.
//
// At the end the chief scores the test file: AUC, log loss and accuracy.
//
//	paramserv data synth-ctr --rows=200000 --fields=26 --out=ctr
//	paramserv local --ps=1 --workers=2 --model=deep_ctr --train_data=ctr --test_data=ctr/test.tsv
package deepctr

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/paramserv/paramserv"
)

// ErrInput is wrapped by the errors of input to fix: a missing or
// malformed data file, a size out of range.
var ErrInput = errors.New("deepctr: bad input")

// Config is one worker's view of a deep CTR job; zero values mean the
// defaults.
type Config struct {
	// TFConfig is the cluster in TF_CONFIG's form ("" reads TF_CONFIG).
	TFConfig string
	// TrainFiles are tab-separated files "label field0 … fieldN-1"
	// (synth-ctr's layout: no integer fields); TestFile the same, held out.
	TrainFiles []string
	TestFile   string

	Dim    int   // embedding width per field: 8
	Hidden []int // hidden layer widths: 32, 16
	// InitStddev is the initial rows' (wide weight and embedding)
	// standard deviation: 0.01.
	InitStddev float64
	// MinCount and EvictAfterSteps are the tables' admission and eviction:
	// 2 and 1000 (set -1 for none).
	MinCount, EvictAfterSteps int64
	// DeepScale multiplies the MLP's output in the logit: a smaller one
	// makes the deep part learn more slowly than the wide one under the
	// same optimizer (0.1).
	DeepScale  float64
	BatchSize  int   // examples per step on each worker: 100
	TrainSteps int64 // global steps: 3000
	// Optimizer runs on the ps on the tables (wide weights and embeddings)
	// and the wide bias: FTRL at 0.1 by default.
	Optimizer paramserv.Optimizer
	// DenseOptimizer is the MLP's layers' own rule (paramserv.Variable's
	// Optimizer): Adam by default, at LearningRate 0.001 if unset. Name
	// "job" gives them Optimizer, as the tables.
	DenseOptimizer paramserv.Optimizer
	Seed           int64
	Sync           bool

	CheckpointDir   string
	SaveSteps       int64
	StepsToValidate int64 // log a progress line every this many local steps: 500
	// ResultFile, if set, is where the chief writes the JSON summary
	// (test_auc among its keys).
	ResultFile string

	StartupTimeout, RecoveryTimeout time.Duration
	Logf                            func(format string, args ...any)
	// MetricsAddr is paramserv.Config's: where the worker serves its
	// metrics ("" reads PARAMSERV_METRICS_ADDR, "off" serves none).
	MetricsAddr string
}

// Defaults returns cfg with its zero fields set to the defaults.
func (cfg Config) Defaults() Config {
	if cfg.Dim == 0 {
		cfg.Dim = 8
	}
	if len(cfg.Hidden) == 0 {
		cfg.Hidden = []int{32, 16}
	}
	if cfg.InitStddev == 0 {
		cfg.InitStddev = 0.01
	}
	if cfg.MinCount == 0 {
		cfg.MinCount = 2
	}
	if cfg.EvictAfterSteps == 0 {
		cfg.EvictAfterSteps = 1000
	}
	cfg.MinCount, cfg.EvictAfterSteps = max(cfg.MinCount, 0), max(cfg.EvictAfterSteps, 0)
	if cfg.DeepScale == 0 {
		cfg.DeepScale = 0.1
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 100
	}
	if cfg.TrainSteps == 0 {
		cfg.TrainSteps = 3000
	}
	if cfg.Optimizer.Name == "" {
		cfg.Optimizer.Name = "ftrl"
	}
	if cfg.Optimizer.LearningRate == 0 {
		cfg.Optimizer.LearningRate = 0.1
	}
	if cfg.DenseOptimizer.Name == "" {
		cfg.DenseOptimizer.Name = "adam"
	}
	if cfg.DenseOptimizer.LearningRate == 0 && cfg.DenseOptimizer.Name != "job" {
		cfg.DenseOptimizer.LearningRate = 0.001
	}
	if cfg.StepsToValidate == 0 {
		cfg.StepsToValidate = 500
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return cfg
}

// Result is the chief's summary of a job, as written to the result file.
type Result struct {
	Model        string             `json:"model"`
	GlobalStep   int64              `json:"global_step"`
	LocalSteps   int64              `json:"local_steps"`
	Workers      int                `json:"workers"`
	ElapsedS     float64            `json:"elapsed_s"`
	ExamplesPerS float64            `json:"examples_per_s"`
	TestAUC      float64            `json:"test_auc"`
	TestLogLoss  float64            `json:"test_log_loss"`
	TestAccuracy float64            `json:"test_accuracy"`
	Metrics      map[string]float64 `json:"metrics"`
	Optimizer    string             `json:"optimizer"`
	LearningRate float64            `json:"learning_rate"`
	// The dense layers' rule: "job" when they train with Optimizer.
	DenseOptimizer    string  `json:"dense_optimizer"`
	DenseLearningRate float64 `json:"dense_learning_rate,omitempty"`
}

// Examples are rows of a data set: Keys holds Fields keys per row (0 for
// an empty field), Labels one 0/1 label per row.
type Examples struct {
	Fields int
	Keys   []uint64
	Labels []float32
}

// Len is the number of rows.
func (e *Examples) Len() int { return len(e.Labels) }

// Key is the key of a field's value: FNV-1a of its bytes, never 0 (the
// key of an empty field, which has no row).
func Key(value string) uint64 {
	if value == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(value))
	if k := h.Sum64(); k != 0 {
		return k
	}
	return 1
}

// ReadFiles reads the rows i of the files (taken as one sequence) with
// i mod numWorkers == worker. Every row must have the same number of
// fields.
func ReadFiles(paths []string, worker, numWorkers int) (*Examples, error) {
	ex := &Examples{}
	i := 0
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		line := 0
		for sc.Scan() {
			line++
			text := sc.Text()
			if text == "" {
				continue
			}
			mine := i%numWorkers == worker
			i++
			if !mine {
				continue
			}
			cols := strings.Split(text, "\t")
			if ex.Fields == 0 {
				ex.Fields = len(cols) - 1
			}
			if len(cols)-1 != ex.Fields || ex.Fields == 0 || (cols[0] != "0" && cols[0] != "1") {
				f.Close()
				return nil, fmt.Errorf("%w: %s:%d: want a 0/1 label and %d tab-separated fields, got %d columns starting %q",
					ErrInput, path, line, max(ex.Fields, 1), len(cols), cols[0])
			}
			ex.Labels = append(ex.Labels, float32(cols[0][0]-'0'))
			for _, v := range cols[1:] {
				ex.Keys = append(ex.Keys, Key(v))
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInput, path, err)
		}
	}
	if ex.Len() == 0 {
		return nil, fmt.Errorf("%w: no rows in %s", ErrInput, strings.Join(paths, ", "))
	}
	return ex, nil
}

// DataFiles lists the training files of names (comma-separated): a
// directory written by synth-ctr stands for the files its meta.json lists.
func DataFiles(names string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(names, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		if !fi.IsDir() {
			out = append(out, name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(name, "meta.json"))
		if err != nil {
			return nil, fmt.Errorf("%w: %s is a directory without a synth-ctr meta.json (name the files instead): %w", ErrInput, name, err)
		}
		var meta struct{ Files []string }
		if err := json.Unmarshal(b, &meta); err != nil || len(meta.Files) == 0 {
			return nil, fmt.Errorf("%w: %s/meta.json: want a \"files\" list (%v)", ErrInput, name, err)
		}
		for _, f := range meta.Files {
			out = append(out, filepath.Join(name, f))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no training files in %q", ErrInput, names)
	}
	return out, nil
}

func tableName(f int) string { return fmt.Sprintf("field%02d", f) }

// Train runs one worker of a deep CTR job until the global step reaches
// cfg.TrainSteps; the chief then evaluates on cfg.TestFile and returns (and
// writes) the result.
func Train(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.Defaults()
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	// The number of fields (and so of tables) is the first row's; the rows
	// are read once Start has said which part is this worker's.
	fields, err := countFields(cfg.TrainFiles[0])
	if err != nil {
		return Result{}, err
	}
	m := newModel(cfg, fields)
	w, err := startWorker(ctx, cfg, m, fields)
	if err != nil {
		return Result{}, err
	}
	defer w.Close()
	data, err := ReadFiles(cfg.TrainFiles, w.Index(), w.NumWorkers())
	if err != nil {
		return Result{}, err
	}
	if data.Fields != fields {
		return Result{}, fmt.Errorf("%w: the training files have rows of %d and %d fields", ErrInput, fields, data.Fields)
	}
	cfg.Logf("deepctr: worker %d: %d training rows of %d fields", w.Index(), data.Len(), fields)

	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		return Result{}, err
	}
	start := time.Now()
	local, err := m.train(ctx, w, data, params, grads)
	if err != nil {
		return Result{}, err
	}
	elapsed := time.Since(start)
	res := Result{Model: "deep_ctr", GlobalStep: w.Step(), LocalSteps: local, Workers: w.NumWorkers(),
		ElapsedS: elapsed.Seconds(), Optimizer: cfg.Optimizer.Name, LearningRate: cfg.Optimizer.LearningRate,
		DenseOptimizer: cfg.DenseOptimizer.Name, DenseLearningRate: cfg.DenseOptimizer.LearningRate}
	if elapsed > 0 {
		res.ExamplesPerS = float64(local) * float64(cfg.BatchSize) * float64(w.NumWorkers()) / elapsed.Seconds()
	}
	if w.IsChief() && cfg.TestFile != "" {
		if err := m.test(ctx, w, params, &res); err != nil {
			return res, err
		}
	}
	if err := w.Done(ctx); err != nil {
		return res, err
	}
	if w.IsChief() && cfg.ResultFile != "" {
		if err := paramserv.WriteResultFile(cfg.ResultFile, res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// check checks the numbers and files of a configuration with its
// defaults; the test file is looked for now, not after training.
func (cfg Config) check() error {
	if cfg.Dim < 1 || cfg.BatchSize < 1 || cfg.TrainSteps < 1 {
		return fmt.Errorf("%w: dim %d, batch size %d, train steps %d: want numbers > 0", ErrInput, cfg.Dim, cfg.BatchSize, cfg.TrainSteps)
	}
	for _, h := range cfg.Hidden {
		if h < 1 {
			return fmt.Errorf("%w: hidden layers %v: want widths > 0", ErrInput, cfg.Hidden)
		}
	}
	if len(cfg.TrainFiles) == 0 {
		return fmt.Errorf("%w: no training files", ErrInput)
	}
	if cfg.TestFile != "" {
		if _, err := os.Stat(cfg.TestFile); err != nil {
			return fmt.Errorf("%w: test file: %w", ErrInput, err)
		}
	}
	return nil
}

// startWorker starts this worker on the model's dense variables and a
// table per field.
func startWorker(ctx context.Context, cfg Config, m *model, fields int) (*paramserv.Worker, error) {
	var tables []paramserv.Table
	for f := range fields {
		tables = append(tables, paramserv.Table{Name: tableName(f), Dim: 1 + cfg.Dim, Init: "normal",
			InitStddev: cfg.InitStddev, Seed: uint64(cfg.Seed)*1000 + uint64(f),
			MinCount: cfg.MinCount, EvictAfterSteps: cfg.EvictAfterSteps})
	}
	return paramserv.Start(ctx, paramserv.Config{
		TFConfig: cfg.TFConfig, Variables: m.variables(cfg.DenseOptimizer), Tables: tables,
		Optimizer: cfg.Optimizer, Sync: cfg.Sync,
		CheckpointDir: cfg.CheckpointDir, SaveSteps: cfg.SaveSteps,
		StartupTimeout: cfg.StartupTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf,
		MetricsAddr: cfg.MetricsAddr,
	}, m.init(cfg.Seed))
}

// train runs steps until the global step reaches cfg.TrainSteps, each on
// a batch of this worker's rows drawn in a shuffled order, and returns the
// number of steps it ran.
func (m *model) train(ctx context.Context, w *paramserv.Worker, data *Examples, params, grads paramserv.Params) (int64, error) {
	cfg := m.cfg
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(w.Index())))
	order := rng.Perm(data.Len())
	var local int64
	var lossSum float64
	var lossN int
	pos := len(order)
	batch := make([]int, 0, cfg.BatchSize)
	for w.Step() < cfg.TrainSteps {
		batch = batch[:0]
		for len(batch) < cfg.BatchSize {
			if pos == len(order) {
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				pos = 0
			}
			batch = append(batch, order[pos])
			pos++
		}
		m.gather(data, batch)
		if err := w.PullTables(ctx, m.rows); err != nil {
			return local, err
		}
		loss := m.step(data, batch, params, grads)
		w.ReportLoss(loss, len(batch)) // the metrics and paramserv local's progress line
		lossSum, lossN = lossSum+loss, lossN+1
		if _, err := w.PushPullRows(ctx, grads, params, m.grads); err != nil {
			return local, err
		}
		local++
		if local%cfg.StepsToValidate == 0 {
			cfg.Logf("deepctr: worker %d: local step %d, global step %d, train log loss %.4f", w.Index(), local, w.Step(), lossSum/float64(lossN))
			lossSum, lossN = 0, 0
		}
	}
	return local, nil
}

// test scores the chief's final parameters on cfg.TestFile into res.
func (m *model) test(ctx context.Context, w *paramserv.Worker, params paramserv.Params, res *Result) error {
	cfg := m.cfg
	test, err := ReadFiles([]string{cfg.TestFile}, 0, 1)
	if err != nil {
		return err
	}
	if test.Fields != m.fields {
		return fmt.Errorf("%w: %s has rows of %d fields, the training files %d", ErrInput, cfg.TestFile, test.Fields, m.fields)
	}
	if _, err := w.Pull(ctx, params); err != nil {
		return err
	}
	scores, err := m.score(ctx, w, test, params)
	if err != nil {
		return err
	}
	res.TestAUC, res.TestLogLoss, res.TestAccuracy = AUC(scores, test.Labels), logLoss(scores, test.Labels), accuracy(scores, test.Labels)
	res.Metrics = map[string]float64{"test_auc": res.TestAUC, "test_log_loss": res.TestLogLoss, "test_accuracy": res.TestAccuracy,
		"test_examples": float64(test.Len())}
	cfg.Logf("deepctr: final: global step %d, test AUC %.4f, log loss %.4f, accuracy %.4f on %d rows of %s",
		w.Step(), res.TestAUC, res.TestLogLoss, res.TestAccuracy, test.Len(), cfg.TestFile)
	return nil
}

// countFields is the number of fields of the first row of path.
func countFields(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInput, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	if !sc.Scan() {
		return 0, fmt.Errorf("%w: %s: no rows (%v)", ErrInput, path, sc.Err())
	}
	n := strings.Count(sc.Text(), "\t")
	if n == 0 {
		return 0, fmt.Errorf("%w: %s:1: want a label and tab-separated fields", ErrInput, path)
	}
	return n, nil
}

// model is one worker's network and buffers.
type model struct {
	cfg         Config
	fields, dim int
	layers      []int // widths: input, hidden..., 1
	keys        []map[uint64]int
	rows, grads []paramserv.Rows
	x, dx       *mat.Dense   // batch × fields·dim: the embeddings, their gradient
	acts        []*mat.Dense // each hidden layer's output
	logit       []float64
}

func newModel(cfg Config, fields int) *model {
	m := &model{cfg: cfg, fields: fields, dim: cfg.Dim}
	m.layers = append([]int{fields * cfg.Dim}, cfg.Hidden...)
	m.layers = append(m.layers, 1)
	m.keys = make([]map[uint64]int, fields)
	m.rows = make([]paramserv.Rows, fields)
	m.grads = make([]paramserv.Rows, fields)
	for f := range fields {
		m.keys[f] = map[uint64]int{}
		m.rows[f].Table, m.grads[f].Table = tableName(f), tableName(f)
	}
	return m
}

// variables are the wide bias (the job's rule, as the tables) and the
// MLP's layers (dense, their own rule unless it is "job").
func (m *model) variables(dense paramserv.Optimizer) []paramserv.Variable {
	var own *paramserv.Optimizer
	if dense.Name != "job" {
		own = &dense
	}
	vs := []paramserv.Variable{{Name: "bias", Shape: []int{1}}}
	for l := 0; l+1 < len(m.layers); l++ {
		vs = append(vs,
			paramserv.Variable{Name: fmt.Sprintf("w%d", l), Shape: []int{m.layers[l], m.layers[l+1]}, Optimizer: own},
			paramserv.Variable{Name: fmt.Sprintf("b%d", l), Shape: []int{m.layers[l+1]}, Optimizer: own})
	}
	return vs
}

// init draws the hidden layers' weights (He normal) and sets the output
// layer and the biases to zero, so the model starts as the wide part alone.
func (m *model) init(seed int64) paramserv.Params {
	rng := rand.New(rand.NewPCG(uint64(seed), 99))
	p := paramserv.Params{"bias": {0}}
	for l := 0; l+1 < len(m.layers); l++ {
		w := make([]float32, m.layers[l]*m.layers[l+1])
		if l+2 < len(m.layers) {
			sd := math.Sqrt(2 / float64(m.layers[l]))
			for i := range w {
				w[i] = float32(rng.NormFloat64() * sd)
			}
		}
		p[fmt.Sprintf("w%d", l)] = w
		p[fmt.Sprintf("b%d", l)] = make([]float32, m.layers[l+1])
	}
	return p
}

// gather lists the distinct keys of each field in the batch and sizes the
// row buffers.
func (m *model) gather(data *Examples, batch []int) {
	for f := range m.fields {
		clear(m.keys[f])
		m.rows[f].Keys = m.rows[f].Keys[:0]
	}
	for _, i := range batch {
		for f, k := range data.Keys[i*m.fields : (i+1)*m.fields] {
			if k == 0 {
				continue
			}
			if _, ok := m.keys[f][k]; !ok {
				m.keys[f][k] = len(m.rows[f].Keys)
				m.rows[f].Keys = append(m.rows[f].Keys, k)
			}
		}
	}
	for f := range m.fields {
		n := len(m.rows[f].Keys) * (1 + m.dim)
		m.rows[f].Values = grow(m.rows[f].Values, n)
		m.grads[f].Keys = m.rows[f].Keys
		m.grads[f].Values = grow(m.grads[f].Values, n)
		clear(m.grads[f].Values)
	}
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// dense views a variable's values as a float64 matrix.
func dense(v []float32, r, c int) *mat.Dense {
	d := make([]float64, len(v))
	for i, x := range v {
		d[i] = float64(x)
	}
	return mat.NewDense(r, c, d)
}

// forward computes the logits of the batch's rows (already pulled) into
// m.logit, keeping the activations for backward.
func (m *model) forward(data *Examples, batch []int, params paramserv.Params) {
	n := len(batch)
	m.x = mat.NewDense(n, m.fields*m.dim, nil)
	m.logit = make([]float64, n)
	b := float64(params["bias"][0])
	for r, i := range batch {
		z := b
		for f, k := range data.Keys[i*m.fields : (i+1)*m.fields] {
			if k == 0 {
				continue
			}
			row := m.rows[f].Values[m.keys[f][k]*(1+m.dim):]
			z += float64(row[0])
			for j := range m.dim {
				m.x.Set(r, f*m.dim+j, float64(row[1+j]))
			}
		}
		m.logit[r] = z
	}
	m.acts = m.acts[:0]
	in := m.x
	last := len(m.layers) - 2
	for l := 0; l <= last; l++ {
		w := dense(params[fmt.Sprintf("w%d", l)], m.layers[l], m.layers[l+1])
		bias := params[fmt.Sprintf("b%d", l)]
		out := mat.NewDense(n, m.layers[l+1], nil)
		out.Mul(in, w)
		for r := range n {
			for j := range m.layers[l+1] {
				v := out.At(r, j) + float64(bias[j])
				if l < last {
					v = max(v, 0)
				}
				out.Set(r, j, v)
			}
		}
		if l < last {
			m.acts = append(m.acts, out)
			in = out
		} else {
			for r := range n {
				m.logit[r] += m.cfg.DeepScale * out.At(r, 0)
			}
		}
	}
}

// step computes the batch's mean log loss and writes the gradients of its
// summed log loss (as sparse_lr's: per-coordinate rules such as Adagrad's
// and FTRL's are defined on per-example gradients, and a mean would shrink a
// rare key's below their initial accumulator) of the dense variables into
// grads and of the rows into m.grads.
func (m *model) step(data *Examples, batch []int, params, grads paramserv.Params) float64 {
	m.forward(data, batch, params)
	n := len(batch)
	var loss float64
	delta := mat.NewDense(n, 1, nil) // d loss / d logit
	var db float64
	for r, i := range batch {
		y := float64(data.Labels[i])
		p := sigmoid(m.logit[r])
		loss += logLossOf(m.logit[r], y)
		d := p - y
		delta.Set(r, 0, m.cfg.DeepScale*d)
		db += d
	}
	grads["bias"][0] = float32(db)
	// Back through the layers, last first.
	for l := len(m.layers) - 2; l >= 0; l-- {
		in := m.x
		if l > 0 {
			in = m.acts[l-1]
		}
		var gw mat.Dense
		gw.Mul(in.T(), delta)
		put(grads[fmt.Sprintf("w%d", l)], gw.RawMatrix().Data)
		gb := grads[fmt.Sprintf("b%d", l)]
		for j := range m.layers[l+1] {
			var s float64
			for r := range n {
				s += delta.At(r, j)
			}
			gb[j] = float32(s)
		}
		w := dense(params[fmt.Sprintf("w%d", l)], m.layers[l], m.layers[l+1])
		var dIn mat.Dense
		dIn.Mul(delta, w.T())
		if l > 0 {
			a := m.acts[l-1]
			for r := range n {
				for j := range m.layers[l] {
					if a.At(r, j) <= 0 {
						dIn.Set(r, j, 0)
					}
				}
			}
			delta = &dIn
		} else {
			m.dx = &dIn
		}
	}
	// The rows: the wide weight's gradient is d loss / d logit, the
	// embedding's the input's.
	for r, i := range batch {
		dl := float32(sigmoid(m.logit[r]) - float64(data.Labels[i]))
		for f, k := range data.Keys[i*m.fields : (i+1)*m.fields] {
			if k == 0 {
				continue
			}
			g := m.grads[f].Values[m.keys[f][k]*(1+m.dim):]
			g[0] += dl
			for j := range m.dim {
				g[1+j] += float32(m.dx.At(r, f*m.dim+j))
			}
		}
	}
	return loss / float64(n)
}

func put(dst []float32, src []float64) {
	for i, v := range src {
		dst[i] = float32(v)
	}
}

// score computes the logits of every row of data, pulling their rows in
// chunks.
func (m *model) score(ctx context.Context, w *paramserv.Worker, data *Examples, params paramserv.Params) ([]float64, error) {
	out := make([]float64, 0, data.Len())
	const chunk = 2000
	batch := make([]int, 0, chunk)
	for lo := 0; lo < data.Len(); lo += chunk {
		batch = batch[:0]
		for i := lo; i < min(lo+chunk, data.Len()); i++ {
			batch = append(batch, i)
		}
		m.gather(data, batch)
		if err := w.PullTables(ctx, m.rows); err != nil {
			return nil, err
		}
		m.forward(data, batch, params)
		out = append(out, m.logit...)
	}
	return out, nil
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// logLossOf is the log loss of logit z for label y, computed stably.
func logLossOf(z, y float64) float64 {
	// log(1+e^z) - y·z
	return max(z, 0) + math.Log1p(math.Exp(-math.Abs(z))) - y*z
}

func logLoss(logits []float64, labels []float32) float64 {
	var s float64
	for i, z := range logits {
		s += logLossOf(z, float64(labels[i]))
	}
	return s / float64(len(logits))
}

func accuracy(logits []float64, labels []float32) float64 {
	var ok int
	for i, z := range logits {
		if (z > 0) == (labels[i] > 0.5) {
			ok++
		}
	}
	return float64(ok) / float64(len(logits))
}

// AUC is the area under the ROC curve of scores for 0/1 labels: the
// probability that a random positive scores above a random negative, ties
// counting one half.
func AUC(scores []float64, labels []float32) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return scores[idx[a]] < scores[idx[b]] })
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		mid := float64(i+j+1) / 2 // mean 1-based rank of the tie group
		for _, k := range idx[i:j] {
			if labels[k] > 0.5 {
				rankSum += mid
				pos++
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}
