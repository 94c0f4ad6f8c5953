// Package sparselr is large-scale sparse logistic regression: one weight
// per feature id, held in a sparse table sharded across the ps, plus a dense
// bias. Each worker reads its own part of the training files (LIBSVM or
// Criteo-style TSV); a batch pulls only the rows of the keys it touches.
package sparselr

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/paramserv/paramserv/internal/data/criteo"
	"github.com/paramserv/paramserv/internal/data/libsvm"
	"github.com/paramserv/paramserv/internal/data/sparsedata"
	"github.com/paramserv/paramserv/internal/metrics"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/progress"
)

// Table is the name of the weight table; Bias the dense bias.
const (
	Table = "weights"
	Bias  = "bias"
)

// Model implements model.SparseModel and model.SparseReadAhead.
type Model struct {
	cfg   model.Config
	train *sparsedata.Dataset
	test  *sparsedata.Dataset // loaded by Evaluate, on the chief

	// --validation_data: its files, and (loaded data) the data set, read
	// by the chief's first validation.
	valPaths []string
	val      *sparsedata.Dataset

	// With --shuffle_buffer, the training part is streamed instead (train
	// stays nil), from these files through this worker's partition.
	stream *sparsedata.Stream
	paths  []string
	part   sparsedata.Partition

	rng    *rand.Rand
	order  []int
	next   int
	passes int  // shuffles of order begun: passes over the loaded part
	ended  bool // the data has ended (Epochs passes)

	// The current batch, and the one before it (its keys stay valid for the
	// trainer's push while the next batch's rows are pulled).
	cur, prev batch
	pos       keyPos // key -> index in cur.keys, reused
	sink      uint64 // touch's loads go here, so that they are made
}

var (
	_ model.SparseReadAhead = (*Model)(nil)
	_ model.TrainingEnder   = (*Model)(nil)
)

type batch struct {
	examples []int              // indices into train, when the data is loaded
	rows     sparsedata.Dataset // the batch's own rows, when it is streamed
	keys     []uint64
	slots    []int32 // for each nonzero of each example, in order, its key's index in keys
}

// New loads this worker's part of the training data.
func New(cfg model.Config) (*Model, error) {
	if cfg.TrainData == "" {
		return nil, errors.New("sparse_lr: --train_data is required (LIBSVM or Criteo TSV files, comma-separated, or a directory)")
	}
	if cfg.BatchSize <= 0 {
		return nil, fmt.Errorf("sparse_lr: batch size must be positive, got %d", cfg.BatchSize)
	}
	if cfg.NumWorkers <= 0 {
		cfg.NumWorkers = 1
	}
	if cfg.Epochs < 0 {
		return nil, fmt.Errorf("sparse_lr: epochs must not be negative, got %d", cfg.Epochs)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	paths, err := resolve(cfg.TrainData, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("sparse_lr: --train_data: %w", err)
	}
	if cfg.TestData != "" {
		test, err := resolve(cfg.TestData, cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("sparse_lr: --test_data: %w", err)
		}
		if err := disjoint(cfg.TrainData, cfg.TestData, paths, test); err != nil {
			return nil, err
		}
	}
	var valPaths []string
	if cfg.ValidationData != "" {
		if valPaths, err = resolve(cfg.ValidationData, cfg.DataDir); err != nil {
			return nil, fmt.Errorf("sparse_lr: --validation_data: %w", err)
		}
		if err := disjointFrom("--train_data", cfg.TrainData, paths, "--validation_data", cfg.ValidationData, valPaths); err != nil {
			return nil, err
		}
		if cfg.TestData != "" {
			test, _ := resolve(cfg.TestData, cfg.DataDir)
			if err := disjointFrom("--test_data", cfg.TestData, test, "--validation_data", cfg.ValidationData, valPaths); err != nil {
				return nil, err
			}
		}
	}
	m := &Model{cfg: cfg, valPaths: valPaths, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Worker)+1))}
	// With at least as many files as workers, each worker takes whole files;
	// otherwise every worker takes every NumWorkers-th line of all files.
	part := sparsedata.Partition{Worker: cfg.Worker, NumWorkers: cfg.NumWorkers}
	if len(paths) >= cfg.NumWorkers && cfg.NumWorkers > 1 {
		var mine []string
		for i, p := range paths {
			if i%cfg.NumWorkers == cfg.Worker {
				mine = append(mine, p)
			}
		}
		paths, part = mine, sparsedata.Partition{}
	}
	if cfg.ShuffleBuffer > 0 {
		opener, err := openerPart(cfg, part)
		if err != nil {
			return nil, fmt.Errorf("sparse_lr: %w", err)
		}
		m.paths, m.part = paths, part
		m.stream, err = sparsedata.NewStream(sparsedata.StreamConfig{
			Paths: paths, Open: opener, ShuffleBuffer: cfg.ShuffleBuffer, Epochs: cfg.Epochs,
			Seed: uint64(cfg.Seed)<<16 ^ uint64(cfg.Worker),
		})
		if err != nil {
			return nil, fmt.Errorf("sparse_lr: %w", err)
		}
		cfg.Logf("sparse_lr: worker %d streams its part of %d file(s), %s, shuffling within %d rows", cfg.Worker, len(paths), passesText(cfg.Epochs), cfg.ShuffleBuffer)
		return m, nil
	}
	ds, st, err := read(cfg, "training", paths, part)
	if err != nil {
		return nil, fmt.Errorf("sparse_lr: %w", err)
	}
	if ds.Len() == 0 {
		return nil, fmt.Errorf("sparse_lr: worker %d got no training examples from %s", cfg.Worker, strings.Join(paths, ", "))
	}
	if cfg.BatchSize > ds.Len() {
		return nil, fmt.Errorf("sparse_lr: --batch_size=%d is larger than worker %d's part of the training data (%d examples of %s over %d workers)", cfg.BatchSize, cfg.Worker, ds.Len(), strings.Join(paths, ", "), cfg.NumWorkers)
	}
	if st.Skipped > 0 {
		cfg.Logf("sparse_lr: skipped %d malformed lines of %d", st.Skipped, st.Lines)
	}
	cfg.Logf("sparse_lr: worker %d has %d training examples (%d nonzeros) from %d file(s), %s", cfg.Worker, ds.Len(), ds.NNZ(), len(paths), passesText(cfg.Epochs))
	m.train = ds
	m.order = make([]int, ds.Len())
	for i := range m.order {
		m.order[i] = i
	}
	m.next = len(m.order) // shuffle on the first batch
	return m, nil
}

// passesText says how many passes a worker makes over its part.
func passesText(epochs int) string {
	if epochs == 0 {
		return "pass after pass until --train_steps"
	}
	return fmt.Sprintf("%d pass(es) (--epochs) or until --train_steps", epochs)
}

// CheckDisjoint returns an error if the training files named by trainData
// include a file of testData (after resolving both as New does, under
// dataDir; directories stand for the files in them): a model must never be
// measured on data it trained on. Names that do not resolve are left to
// New to report.
func CheckDisjoint(trainData, testData, dataDir string) error {
	train, err1 := resolve(trainData, dataDir)
	test, err2 := resolve(testData, dataDir)
	if err1 != nil || err2 != nil {
		return nil
	}
	return disjoint(trainData, testData, train, test)
}

// disjoint compares files as the OS sees them (os.SameFile), so another
// spelling, a symbolic or a hard link of a test file is caught too.
func disjoint(trainData, testData string, train, test []string) error {
	for _, t := range test {
		ti, err := os.Stat(t)
		if err != nil {
			continue
		}
		for _, p := range train {
			if pi, err := os.Stat(p); err == nil && os.SameFile(ti, pi) {
				trainAbs, _ := filepath.Abs(p)
				testAbs, _ := filepath.Abs(t)
				same := testAbs
				if testAbs != trainAbs {
					same = trainAbs + ", the same file as " + testAbs
				}
				return fmt.Errorf("sparse_lr: --train_data=%s reads the --test_data=%s file (%s): a model must not be tested on data it trained on; name the training files alone (e.g. a9a/a9a, not the directory a9a, which holds a9a.t too)", trainData, testData, same)
			}
		}
	}
	return nil
}

// disjointFrom refuses validation files that are also training or test
// files (os.SameFile): validation measures data the model never trained
// on, and the test set is kept for the end.
func disjointFrom(flagA, listA string, a []string, flagB, listB string, b []string) error {
	for _, x := range b {
		xi, err := os.Stat(x)
		if err != nil {
			continue
		}
		for _, y := range a {
			if yi, err := os.Stat(y); err == nil && os.SameFile(xi, yi) {
				abs, _ := filepath.Abs(x)
				return fmt.Errorf("sparse_lr: %s=%s reads the %s=%s file %s: validation data must be a file of its own, neither trained nor tested on", flagB, listB, flagA, listA, abs)
			}
		}
	}
	return nil
}

// resolve turns a comma-separated list of files or directories into files.
// A name that does not exist is also looked for under dataDir, and under
// dataDir/<stem> ("a9a.t" in dataDir/a9a/).
func resolve(list, dataDir string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		cands := []string{name}
		if dataDir != "" && !filepath.IsAbs(name) {
			stem, _, _ := strings.Cut(filepath.Base(name), ".")
			cands = append(cands, filepath.Join(dataDir, name), filepath.Join(dataDir, stem, name))
		}
		found := ""
		for _, c := range cands {
			if _, err := os.Stat(c); err == nil {
				found = c
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%q not found (looked at %s)", name, strings.Join(cands, ", "))
		}
		fi, _ := os.Stat(found)
		if !fi.IsDir() {
			out = append(out, found)
			continue
		}
		entries, err := os.ReadDir(found)
		if err != nil {
			return nil, err
		}
		var files []string
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".json") || n == "test.tsv" {
				continue
			}
			files = append(files, filepath.Join(found, n))
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("directory %s holds no data files", found)
		}
		out = append(out, files...)
	}
	if len(out) == 0 {
		return nil, errors.New("no files given")
	}
	return out, nil
}

// read loads data ("training", "validation" or "test") from paths,
// logging its progress every few seconds and telling cfg.LoadProgress.
func read(cfg model.Config, data string, paths []string, part sparsedata.Partition) (*sparsedata.Dataset, sparsedata.Stats, error) {
	onSkip := func(e *sparsedata.ParseError) { cfg.Logf("skipping %v", e) }
	m := &progress.Meter{What: fmt.Sprintf("sparse_lr: worker %d loading %s data", cfg.Worker, data), Logf: cfg.Logf, QuietIfQuick: true, Stop: cfg.Stop}
	if cfg.LoadProgress != nil {
		m.Observe = func(u progress.Update) { cfg.LoadProgress(data, u) }
	}
	switch cfg.InputFormat {
	case "", "libsvm":
		return libsvm.ReadFiles(paths, libsvm.Options{NumFeatures: cfg.NumFeatures, SkipBadLines: cfg.SkipBadLines, OnSkip: onSkip, Partition: part, Progress: m})
	case "criteo":
		return criteo.ReadFiles(paths, criteo.Options{IntFields: cfg.IntFields, CatFields: cfg.CatFields, SkipBadLines: cfg.SkipBadLines, OnSkip: onSkip, Partition: part, Progress: m})
	}
	return nil, sparsedata.Stats{}, fmt.Errorf("unknown --input_format %q (want libsvm or criteo)", cfg.InputFormat)
}

// openerPart is read's opener of one file, for streaming.
func openerPart(cfg model.Config, part sparsedata.Partition) (sparsedata.Opener, error) {
	onSkip := func(e *sparsedata.ParseError) { cfg.Logf("skipping %v", e) }
	switch cfg.InputFormat {
	case "", "libsvm":
		return libsvm.Opener(libsvm.Options{NumFeatures: cfg.NumFeatures, SkipBadLines: cfg.SkipBadLines, OnSkip: onSkip, Partition: part}), nil
	case "criteo":
		return criteo.Opener(criteo.Options{IntFields: cfg.IntFields, CatFields: cfg.CatFields, SkipBadLines: cfg.SkipBadLines, OnSkip: onSkip, Partition: part}), nil
	}
	return nil, fmt.Errorf("unknown --input_format %q (want libsvm or criteo)", cfg.InputFormat)
}

// Variables: the dense bias.
func (m *Model) Variables() []model.Variable {
	return []model.Variable{{Name: Bias, Shape: []int{1}}}
}

// Tables: one weight per feature id.
func (m *Model) Tables() []model.Table {
	return []model.Table{{Name: Table, Dim: 1, MinCount: m.cfg.MinCount, EvictAfterSteps: m.cfg.EvictAfterSteps}}
}

// Init starts the bias at zero (the weights start at zero on the ps).
func (m *Model) Init(int64) model.Params { return model.NewParams(m.Variables()) }

// ComputeGradients is not used: the trainer drives sparse models through
// NextBatch and SparseGradients.
func (m *Model) ComputeGradients(model.Params, model.Params) (float64, error) {
	return 0, errors.New("sparse_lr: a sparse model is trained through SparseGradients")
}

// NextBatch draws the next batch (shuffled order, a new shuffle each epoch;
// or, streaming, the next rows of the stream) and returns its distinct keys.
// With Epochs, batches run on across the passes, the last one holds what
// is left, and then it returns model.ErrEndOfData: a worker whose part
// holds n rows makes ceil(Epochs·n/BatchSize) batches.
func (m *Model) NextBatch() ([][]uint64, error) {
	if m.ended {
		return nil, model.ErrEndOfData
	}
	m.prev, m.cur = m.cur, m.prev
	b := &m.cur
	b.examples, b.keys, b.slots = b.examples[:0], b.keys[:0], b.slots[:0]
	b.rows.Labels, b.rows.Offsets, b.rows.Keys, b.rows.Vals = b.rows.Labels[:0], b.rows.Offsets[:0], b.rows.Keys[:0], b.rows.Vals[:0]
	m.pos.reset(m.cfg.BatchSize)
	if m.stream != nil {
		for range m.cfg.BatchSize {
			ex, err := m.stream.Next() // io.EOF only after Epochs passes
			if err == io.EOF {
				m.ended = true
				break
			}
			if err != nil {
				return nil, fmt.Errorf("sparse_lr: %w", err)
			}
			b.rows.Append(ex)
			for _, k := range ex.Keys {
				b.slots = append(b.slots, m.pos.slot(k, &b.keys))
			}
		}
	} else {
		for range m.cfg.BatchSize {
			if m.next == len(m.order) {
				if m.cfg.Epochs > 0 && m.passes == m.cfg.Epochs {
					m.ended = true
					break
				}
				m.passes++
				m.rng.Shuffle(len(m.order), func(i, j int) { m.order[i], m.order[j] = m.order[j], m.order[i] })
				m.next = 0
			}
			b.examples = append(b.examples, m.order[m.next])
			m.next++
		}
		m.touch(b.examples)
		for _, i := range b.examples {
			for _, k := range m.train.At(i).Keys {
				b.slots = append(b.slots, m.pos.slot(k, &b.keys))
			}
		}
	}
	if m.size(b) == 0 {
		// The batch returned last stays the current one
		// (model.SparseReadAhead).
		m.prev, m.cur = m.cur, m.prev
		return nil, model.ErrEndOfData
	}
	return [][]uint64{b.keys}, nil
}

// touch reads a word of every cache line of the examples' offsets, labels,
// keys and values before the batch uses them: the examples lie at random
// places of a data set far larger than the caches, and these loads, which
// depend on nothing but the offsets, miss together instead of one after
// the other between the batch's hash-set inserts (NextBatch) and its
// arithmetic (gradients).
func (m *Model) touch(examples []int) {
	d := m.train
	var sum uint64
	for _, i := range examples {
		sum += uint64(d.Offsets[i+1]) + uint64(math.Float32bits(d.Labels[i]))
	}
	for _, i := range examples {
		lo, hi := d.Offsets[i], d.Offsets[i+1]
		for j := lo; j < hi; j += 8 { // 64 bytes of keys
			sum += d.Keys[j]
		}
		for j := lo; j < hi; j += 16 { // 64 bytes of values
			sum += uint64(math.Float32bits(d.Vals[j]))
		}
	}
	m.sink = sum
}

// size is the number of examples of batch b, and at its n-th.
func (m *Model) size(b *batch) int {
	if m.stream != nil {
		return b.rows.Len()
	}
	return len(b.examples)
}

func (m *Model) at(b *batch, n int) sparsedata.Example {
	if m.stream != nil {
		return b.rows.At(n)
	}
	return m.train.At(b.examples[n])
}

// EndTraining drops the loaded training set when the final evaluation
// scores --test_data instead (model.TrainingEnder): a worker then never
// holds both data sets at once.
func (m *Model) EndTraining() bool {
	if m.train == nil || m.cfg.TestData == "" {
		return false
	}
	m.train, m.order, m.cur, m.prev = nil, nil, batch{}, batch{}
	m.ended = true // NextBatch: the data has ended
	return true
}

// Close stops the background reader of a streamed data set.
func (m *Model) Close() {
	if m.stream != nil {
		m.stream.Close()
	}
}

// SparseGradients: the batch's mean log loss, and the gradient of its
// summed log loss, d/dw_k = Σ (p - y)·x_k, d/db = Σ (p - y). The sum, not
// the mean: FTRL-Proximal's per-coordinate rates are defined on per-example
// gradients, and averaging over a batch would shrink the gradient of a rare
// key (seen once in the batch) by the batch size, below FTRL's beta term.
func (m *Model) SparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.gradients(&m.cur, params, grads, rows, rowGrads)
}

// PrevSparseGradients is SparseGradients of the batch before the current
// one (model.SparseReadAhead): the trainer computes it while the rows of
// the current one are pulled.
func (m *Model) PrevSparseGradients(params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.gradients(&m.prev, params, grads, rows, rowGrads)
}

func (m *Model) gradients(b *batch, params, grads model.Params, rows, rowGrads [][]float32) (float64, error) {
	w, gw := rows[0], rowGrads[0]
	clear(gw)
	bias := float64(params[Bias][0])
	var loss, gb float64
	n := float64(m.size(b))
	s := 0
	for e := range m.size(b) {
		ex := m.at(b, e)
		z := bias
		for j := range ex.Keys {
			z += float64(w[b.slots[s+j]]) * float64(ex.Vals[j])
		}
		p := sigmoid(z)
		loss += metrics.PointLogLoss(ex.Label, p)
		d := p - float64(ex.Label)
		gb += d
		for j := range ex.Keys {
			gw[b.slots[s+j]] += float32(d * float64(ex.Vals[j]))
		}
		s += len(ex.Keys)
	}
	grads[Bias][0] = float32(gb)
	return loss / n, nil
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// Progress logs the batch loss.
func (m *Model) Progress(local, global int64, params model.Params, loss float64) string {
	return fmt.Sprintf("Worker %d: step %d (global step: %d), batch log loss %.4f, bias %.4f", m.cfg.Worker, local, global, loss, params[Bias][0])
}

// Evaluate is not used for sparse models (see EvaluateSparse).
func (m *Model) Evaluate(model.Params) (map[string]float64, error) {
	return nil, errors.New("sparse_lr: evaluated through EvaluateSparse")
}

// EvaluateSparse scores the test data (--test_data) with the trained
// weights: log loss, accuracy and AUC. Without test data it scores this
// worker's training part.
func (m *Model) EvaluateSparse(params model.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	if m.stream != nil {
		return m.evaluateStreamed(params, lookup)
	}
	ds := m.train
	what := "train"
	if m.cfg.TestData != "" {
		if m.test == nil {
			paths, err := resolve(m.cfg.TestData, m.cfg.DataDir)
			if err != nil {
				return nil, fmt.Errorf("sparse_lr: --test_data: %w", err)
			}
			test, _, err := read(m.cfg, "test", paths, sparsedata.Partition{})
			if err != nil {
				return nil, fmt.Errorf("sparse_lr: %w", err)
			}
			m.test = test
		}
		ds, what = m.test, "test"
	}
	r, keys, err := score(ds, params, lookup)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		what + "_log_loss": r.logLoss,
		what + "_accuracy": r.accuracy,
		what + "_auc":      r.auc,
		"loss":             r.logLoss,
		what + "_examples": float64(r.n),
		// The keys of the rows scored (looked up on the ps), not the
		// trained table's rows: 200k test rows of 26 fields hold far
		// fewer keys than the 2M rows the table learned.
		what + "_distinct_keys": float64(keys),
	}, nil
}

// ValidateSparse scores the --validation_data files (model.SparseValidator):
// val_log_loss, val_accuracy and val_auc. Without them it returns nothing.
// The rows are read from the ps as a training pull reads them, so with
// --min_count or --evict_after_steps the reads count as touches.
func (m *Model) ValidateSparse(params model.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	if len(m.valPaths) == 0 {
		return nil, nil
	}
	var r scores
	if m.stream != nil {
		// Streamed training: the validation files are streamed too, a
		// chunk at a time, at every validation.
		var err error
		if r, err = m.scoreFiles(m.valPaths, sparsedata.Partition{}, params, lookup); err != nil {
			return nil, err
		}
	} else {
		if m.val == nil {
			val, st, err := read(m.cfg, "validation", m.valPaths, sparsedata.Partition{})
			if err != nil {
				return nil, fmt.Errorf("sparse_lr: --validation_data: %w", err)
			}
			if val.Len() == 0 {
				return nil, fmt.Errorf("sparse_lr: --validation_data=%s holds no examples", m.cfg.ValidationData)
			}
			m.cfg.Logf("sparse_lr: validating on %d examples of %s (%d lines skipped)", val.Len(), strings.Join(m.valPaths, ", "), st.Skipped)
			m.val = val
		}
		var err error
		if r, _, err = score(m.val, params, lookup); err != nil {
			return nil, err
		}
	}
	return map[string]float64{"val_log_loss": r.logLoss, "val_accuracy": r.accuracy, "val_auc": r.auc}, nil
}

// scores are the metrics of a data set's predictions.
type scores struct {
	logLoss, accuracy, auc float64
	n                      int
}

func scoresOf(labels []float32, probs []float64) scores {
	return scores{logLoss: metrics.LogLoss(labels, probs), accuracy: metrics.Accuracy(labels, probs), auc: metrics.AUC(labels, probs), n: len(labels)}
}

// score predicts every example of ds with the weights of its distinct keys
// (pulled in chunks) and params' bias; it also returns the number of
// distinct keys.
func score(ds *sparsedata.Dataset, params model.Params, lookup func(int, []uint64, []float32) error) (scores, int, error) {
	var pos keyPos
	pos.reset(1)
	var keys []uint64
	for _, k := range ds.Keys {
		pos.slot(k, &keys)
	}
	w := make([]float32, len(keys))
	const chunk = 1 << 18
	for lo := 0; lo < len(keys); lo += chunk {
		hi := min(lo+chunk, len(keys))
		if err := lookup(0, keys[lo:hi], w[lo:hi]); err != nil {
			return scores{}, 0, err
		}
	}
	labels := make([]float32, ds.Len())
	probs := make([]float64, ds.Len())
	bias := float64(params[Bias][0])
	for i := range ds.Len() {
		ex := ds.At(i)
		z := bias
		for j, k := range ex.Keys {
			z += float64(w[pos.slot(k, &keys)]) * float64(ex.Vals[j]) // every key is in pos
		}
		labels[i], probs[i] = ex.Label, sigmoid(z)
	}
	return scoresOf(labels, probs), len(keys), nil
}

// evaluateStreamed scores a streamed model: the test files, or this
// worker's part of the training files. It reports no <what>_distinct_keys, which
// would need every key at once.
func (m *Model) evaluateStreamed(params model.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	paths, part, what := m.paths, m.part, "train"
	if m.cfg.TestData != "" {
		var err error
		if paths, err = resolve(m.cfg.TestData, m.cfg.DataDir); err != nil {
			return nil, fmt.Errorf("sparse_lr: --test_data: %w", err)
		}
		part, what = sparsedata.Partition{}, "test"
	}
	r, err := m.scoreFiles(paths, part, params, lookup)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		what + "_log_loss": r.logLoss,
		what + "_accuracy": r.accuracy,
		what + "_auc":      r.auc,
		"loss":             r.logLoss,
		what + "_examples": float64(r.n),
	}, nil
}

// scoreFiles scores part of the files, read once in chunks of rows, so
// that no more than a chunk is held (beside one label and probability per
// row, for the AUC).
func (m *Model) scoreFiles(paths []string, part sparsedata.Partition, params model.Params, lookup func(int, []uint64, []float32) error) (scores, error) {
	opener, err := openerPart(m.cfg, part)
	if err != nil {
		return scores{}, fmt.Errorf("sparse_lr: %w", err)
	}
	const chunk = 1 << 16
	st, err := sparsedata.NewStream(sparsedata.StreamConfig{Paths: paths, Open: opener, Epochs: 1, ShuffleBuffer: 1, ChunkRows: 4096})
	if err != nil {
		return scores{}, fmt.Errorf("sparse_lr: %w", err)
	}
	defer st.Close()
	var (
		labels []float32
		probs  []float64
		d      sparsedata.Dataset
		keys   []uint64
		w      []float32
	)
	pos := make(map[uint64]int32)
	bias := float64(params[Bias][0])
	score := func() error {
		clear(pos)
		keys = keys[:0]
		for _, k := range d.Keys {
			if _, ok := pos[k]; !ok {
				pos[k] = int32(len(keys))
				keys = append(keys, k)
			}
		}
		w = slices.Grow(w[:0], len(keys))[:len(keys)]
		if err := lookup(0, keys, w); err != nil {
			return err
		}
		for i := range d.Len() {
			ex := d.At(i)
			z := bias
			for j, k := range ex.Keys {
				z += float64(w[pos[k]]) * float64(ex.Vals[j])
			}
			labels, probs = append(labels, ex.Label), append(probs, sigmoid(z))
		}
		d.Labels, d.Offsets, d.Keys, d.Vals = d.Labels[:0], d.Offsets[:0], d.Keys[:0], d.Vals[:0]
		return nil
	}
	for {
		ex, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return scores{}, fmt.Errorf("sparse_lr: %w", err)
		}
		d.Append(ex)
		if d.Len() == chunk {
			if err := score(); err != nil {
				return scores{}, err
			}
		}
	}
	if d.Len() > 0 {
		if err := score(); err != nil {
			return scores{}, err
		}
	}
	return scoresOf(labels, probs), nil
}
