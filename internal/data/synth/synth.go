package synth

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/data/criteo"
	"github.com/paramserv/paramserv/internal/metrics"
	"github.com/paramserv/paramserv/internal/mix"
)

// Config describes a data set to generate. Start from DefaultConfig.
type Config struct {
	Out      string  // output directory, created if missing
	Rows     int64   // training rows, >= 1
	TestRows int64   // held-out rows; 0: Rows/10 clamped to [1000, 1000000]
	Fields   int     // categorical fields per row, 1..1000
	Shards   int     // training shard files, 1..100000
	Seed     uint64  // the same seed gives the same files
	ZipfS    float64 // power-law exponent of value frequencies, 0 (uniform) .. 5
	LogitStd float64 // standard deviation of the planted logit w·x, >= 0
	Bias     float64 // planted intercept
	Missing  float64 // probability that a field is empty, [0, 1)
	Parallel int     // shards generated at once; 0: GOMAXPROCS
}

// DefaultConfig is a Criteo-like setting: 26 fields, Zipf's law (s = 1),
// a click rate near 25% and a Bayes AUC near 0.8.
func DefaultConfig() Config {
	return Config{
		Rows:     1_000_000,
		Fields:   26,
		Shards:   8,
		Seed:     1,
		ZipfS:    1,
		LogitStd: 1.5,
		Bias:     -1.5,
	}
}

// RegisterFlags binds the flags of `paramserv data synth-ctr` to c, with
// c's current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Out, "out", c.Out, "output `dir`ectory")
	fs.Int64Var(&c.Rows, "rows", c.Rows, "training rows")
	fs.Int64Var(&c.TestRows, "test-rows", c.TestRows, "held-out rows (0: rows/10, at least 1000, at most 1000000)")
	fs.IntVar(&c.Fields, "fields", c.Fields, "categorical fields per row")
	fs.IntVar(&c.Shards, "shards", c.Shards, "training shard files")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
	fs.Float64Var(&c.ZipfS, "zipf-s", c.ZipfS, "power-law exponent of feature frequencies")
	fs.Float64Var(&c.LogitStd, "logit-std", c.LogitStd, "standard deviation of the planted logit")
	fs.Float64Var(&c.Bias, "bias", c.Bias, "planted intercept")
	fs.Float64Var(&c.Missing, "missing", c.Missing, "probability that a field is empty")
	fs.IntVar(&c.Parallel, "parallel", c.Parallel, "shards generated at once (0: one per CPU)")
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("synth: "+format, args...))
		}
	}
	check(c.Out != "", "no output directory (--out)")
	check(c.Rows >= 1, "rows %d: want >= 1", c.Rows)
	check(c.TestRows >= 0, "test rows %d: want >= 0", c.TestRows)
	check(c.Fields >= 1 && c.Fields <= 1000, "fields %d: want 1..1000", c.Fields)
	check(c.Shards >= 1 && c.Shards <= 100000, "shards %d: want 1..100000", c.Shards)
	check(c.ZipfS >= 0 && c.ZipfS <= 5, "zipf-s %v: want 0..5", c.ZipfS)
	check(c.LogitStd >= 0 && c.LogitStd <= 100, "logit-std %v: want 0..100", c.LogitStd)
	check(!math.IsNaN(c.Bias) && math.Abs(c.Bias) <= 100, "bias %v: want -100..100", c.Bias)
	check(c.Missing >= 0 && c.Missing < 1, "missing %v: want [0, 1)", c.Missing)
	check(c.Parallel >= 0, "parallel %d: want >= 0", c.Parallel)
	return errors.Join(errs...)
}

// Meta describes a generated data set; Generate writes it to meta.json.
type Meta struct {
	Format    string   `json:"format"`     // "criteo-tsv"
	IntFields int      `json:"int_fields"` // always 0
	CatFields int      `json:"cat_fields"`
	Files     []string `json:"files"`     // training shards, relative to the directory
	TestFile  string   `json:"test_file"` // relative to the directory
	Rows      int64    `json:"rows"`
	TestRows  int64    `json:"test_rows"`
	Bytes     int64    `json:"bytes"` // of the training shards

	Seed     uint64  `json:"seed"`
	ZipfS    float64 `json:"zipf_s"`
	Vocab    []int64 `json:"vocab"` // values per field
	Missing  float64 `json:"missing"`
	LogitStd float64 `json:"logit_std"`
	Sigma    float64 `json:"sigma"` // standard deviation of each planted weight
	Bias     float64 `json:"bias"`

	// DistinctKeys estimates (HyperLogLog, ~1%) the distinct keys of the
	// training shards.
	DistinctKeys      int64   `json:"distinct_keys"`
	TrainPositiveRate float64 `json:"train_positive_rate"`
	TrainBayesLogLoss float64 `json:"train_bayes_logloss"`
	TestPositiveRate  float64 `json:"test_positive_rate"`
	// The true probabilities scored on the held-out file. TestBayesAUC is
	// null when the held-out file has a single class.
	TestBayesAUC      *float64 `json:"test_bayes_auc"`
	TestBayesLogLoss  float64  `json:"test_bayes_logloss"`
	TestBayesAccuracy float64  `json:"test_bayes_accuracy"`
}

// Planted returns the true model of the data set.
func (m *Meta) Planted() Planted { return Planted{Seed: m.Seed, Sigma: m.Sigma, Bias: m.Bias} }

// MetaFile is the name of the Meta file in a data set's directory.
const MetaFile = "meta.json"

// ReadMeta reads dir/meta.json.
func ReadMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, err
	}
	m := &Meta{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("synth: %s: %w", filepath.Join(dir, MetaFile), err)
	}
	return m, nil
}

// Planted is the true logistic model of a data set: weight Weight(key) for
// every key and intercept Bias.
type Planted struct {
	Seed  uint64
	Sigma float64
	Bias  float64
}

// Weight is the planted weight of key: Sigma times a standard normal drawn
// from a hash of (key, Seed).
func (p Planted) Weight(key uint64) float64 {
	return p.Sigma * gaussian(mix.SplitMix64(key^mix.SplitMix64(p.Seed^0x5eed)))
}

// Prob is the true click probability of an example with these keys (all
// values 1).
func (p Planted) Prob(keys []uint64) float64 {
	z := p.Bias
	for _, k := range keys {
		z += p.Weight(k)
	}
	return sigmoid(z)
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// headRanks is how many of the most frequent values of each field have
// their text, key and weight precomputed: with s = 1 they make up about
// half of all draws.
const headRanks = 4096

type field struct {
	index int
	vocab uint64
	zipf  zipf
	perm  uint64   // key of the field's rank-to-value bijection
	head  []cached // the first min(vocab, headRanks) ranks
}

type cached struct {
	hex    [8]byte
	key    uint64
	weight float64
}

// generator holds what all shards share; it is read-only once built.
type generator struct {
	cfg    Config
	model  Planted
	fields []field
}

func newGenerator(cfg Config) *generator {
	g := &generator{cfg: cfg}
	g.model = Planted{
		Seed:  cfg.Seed,
		Sigma: cfg.LogitStd / math.Sqrt(float64(cfg.Fields)*(1-cfg.Missing)),
		Bias:  cfg.Bias,
	}
	maxVocab := math.Min(math.Max(4*float64(cfg.Rows), 8), 1<<32)
	for f := range cfg.Fields {
		v := maxVocab
		if cfg.Fields > 1 {
			t := float64(f) / float64(cfg.Fields-1)
			v = math.Round(math.Exp(math.Log(8) + t*(math.Log(maxVocab)-math.Log(8))))
		}
		fd := field{index: f, vocab: uint64(v), zipf: newZipf(uint64(v), cfg.ZipfS), perm: mix.SplitMix64(cfg.Seed ^ mix.SplitMix64(uint64(f)+1))}
		fd.head = make([]cached, min(fd.vocab, headRanks))
		for r := range fd.head {
			fd.head[r] = g.value(&fd, uint64(r))
		}
		g.fields = append(g.fields, fd)
	}
	return g
}

// value computes the text, key and weight of rank r of field fd.
func (g *generator) value(fd *field, r uint64) cached {
	var c cached
	v := perm32(uint32(r), fd.perm)
	const digits = "0123456789abcdef"
	for i := 7; i >= 0; i-- {
		c.hex[i] = digits[v&0xf]
		v >>= 4
	}
	c.key = criteo.CatKey(fd.index, c.hex[:])
	c.weight = g.model.Weight(c.key)
	return c
}

// shardResult is what one shard (or the test file) reports.
type shardResult struct {
	bytes     int64
	positives int64
	logLoss   float64 // sum over rows
	keys      *hll
	test      *metrics.Accumulator
}

// writeShard writes rows rows from stream id to path, atomically (a
// temporary file renamed on success).
func (g *generator) writeShard(ctx context.Context, path string, id uint64, rows int64, test bool) (res shardResult, err error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if test {
		res.test = &metrics.Accumulator{}
	} else {
		res.keys = &hll{}
	}
	rng := newStream(g.cfg.Seed, id)
	line := make([]byte, 0, 1+9*len(g.fields)+1)
	for i := range rows {
		if i%4096 == 0 {
			if testHookRows != nil {
				testHookRows(tmp, i)
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
		}
		line = append(line[:0], '0')
		z := g.model.Bias
		for fi := range g.fields {
			fd := &g.fields[fi]
			line = append(line, '\t')
			if g.cfg.Missing > 0 && rng.float() < g.cfg.Missing {
				continue
			}
			r := fd.zipf.rank(rng.float())
			var c cached
			if r < uint64(len(fd.head)) {
				c = fd.head[r]
			} else {
				c = g.value(fd, r)
			}
			line = append(line, c.hex[:]...)
			z += c.weight
			if res.keys != nil {
				res.keys.add(c.key)
			}
		}
		p := sigmoid(z)
		var y float32
		if rng.float() < p {
			y = 1
			line[0] = '1'
			res.positives++
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return res, err
		}
		res.bytes += int64(len(line))
		res.logLoss += metrics.PointLogLoss(y, p)
		if res.test != nil {
			res.test.Add(y, p)
		}
	}
	if err := w.Flush(); err != nil {
		return res, err
	}
	if err := f.Close(); err != nil {
		return res, err
	}
	return res, os.Rename(tmp, path)
}

// testHookRows, if set (by tests, before Generate), is called by each
// shard's writer with its temporary file and the rows written so far,
// every 4096 rows, just before the writer checks for cancellation.
var testHookRows func(tmp string, rows int64)

// testStream is the stream id of the test file; shard i uses i.
const testStream = math.MaxUint64

// Generate writes the data set described by cfg and returns its Meta. It
// writes the shards and the test file in parallel (cfg.Parallel at a time),
// each atomically, and meta.json last, so a directory with a meta.json is
// complete (an earlier run's meta.json is removed first, and its shards
// beyond cfg.Shards at the end). On error or cancellation it returns the
// first error and leaves no temporary files behind (finished shards stay).
func Generate(ctx context.Context, cfg Config) (*Meta, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.TestRows == 0 {
		cfg.TestRows = min(max(cfg.Rows/10, 1000), 1_000_000)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	// A directory written before holds that run's meta.json: until this
	// run's is written, the directory is not complete.
	if err := os.Remove(filepath.Join(cfg.Out, MetaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("synth: %w", err)
	}
	g := newGenerator(cfg)
	meta := &Meta{
		Format: "criteo-tsv", CatFields: cfg.Fields, TestFile: "test.tsv",
		Rows: cfg.Rows, TestRows: cfg.TestRows,
		Seed: cfg.Seed, ZipfS: cfg.ZipfS, Missing: cfg.Missing,
		LogitStd: cfg.LogitStd, Sigma: g.model.Sigma, Bias: cfg.Bias,
	}
	for _, fd := range g.fields {
		meta.Vocab = append(meta.Vocab, int64(fd.vocab))
	}
	for i := range cfg.Shards {
		meta.Files = append(meta.Files, fmt.Sprintf("part-%05d.tsv", i))
	}

	// Job i < Shards is shard i; job Shards is the test file.
	results := make([]shardResult, cfg.Shards+1)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int)
	var wg sync.WaitGroup
	parallel := cfg.Parallel
	if parallel == 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	for range min(parallel, cfg.Shards+1) {
		wg.Go(func() {
			for j := range jobs {
				var err error
				if j == cfg.Shards {
					results[j], err = g.writeShard(ctx, filepath.Join(cfg.Out, meta.TestFile), testStream, cfg.TestRows, true)
				} else {
					lo, hi := cfg.Rows*int64(j)/int64(cfg.Shards), cfg.Rows*int64(j+1)/int64(cfg.Shards)
					results[j], err = g.writeShard(ctx, filepath.Join(cfg.Out, meta.Files[j]), uint64(j), hi-lo, false)
				}
				if err != nil {
					cancel(fmt.Errorf("synth: job %d: %w", j, err))
				}
			}
		})
	}
	// The test file first: it is the one job that must also be scored.
	order := make([]int, 0, cfg.Shards+1)
	order = append(order, cfg.Shards)
	for i := range cfg.Shards {
		order = append(order, i)
	}
feed:
	for _, j := range order {
		select {
		case jobs <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	var keys hll
	var pos int64
	var ll float64
	for _, r := range results[:cfg.Shards] {
		keys.merge(r.keys)
		meta.Bytes += r.bytes
		pos += r.positives
		ll += r.logLoss
	}
	meta.DistinctKeys = int64(math.Round(keys.estimate()))
	meta.TrainPositiveRate = float64(pos) / float64(cfg.Rows)
	meta.TrainBayesLogLoss = ll / float64(cfg.Rows)
	t := results[cfg.Shards]
	meta.TestPositiveRate = float64(t.positives) / float64(cfg.TestRows)
	if auc := t.test.AUC(); !math.IsNaN(auc) {
		meta.TestBayesAUC = &auc
	}
	meta.TestBayesLogLoss = t.test.LogLoss()
	meta.TestBayesAccuracy = t.test.Accuracy()
	if err := removeStaleShards(cfg.Out, cfg.Shards); err != nil {
		return nil, err
	}
	if err := writeMeta(cfg.Out, meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// removeStaleShards removes the shards part-NNNNN.tsv, NNNNN >= shards,
// an earlier run with more shards wrote into dir: a trainer given the
// directory reads every file in it, and would train on them too.
func removeStaleShards(dir string, shards int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for _, e := range ents {
		var i int
		if n, err := fmt.Sscanf(e.Name(), "part-%05d.tsv", &i); err != nil || n != 1 || e.Name() != fmt.Sprintf("part-%05d.tsv", i) || i < shards {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("synth: a shard of an earlier run: %w", err)
		}
	}
	return nil
}

func writeMeta(dir string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	path := filepath.Join(dir, MetaFile)
	if err := os.WriteFile(path+".tmp", append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

// Command runs `paramserv data synth-ctr` with args (the flags after the
// subcommand) and prints a summary with the throughput to stdout.
func Command(ctx context.Context, args []string, stdout io.Writer) error {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("synth-ctr", flag.ContinueOnError)
	fs.SetOutput(stdout)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("synth-ctr: unexpected arguments %q", fs.Args())
	}
	start := time.Now()
	m, err := Generate(ctx, cfg)
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	auc := "n/a"
	if m.TestBayesAUC != nil {
		auc = strconv.FormatFloat(*m.TestBayesAUC, 'f', 4, 64)
	}
	_, err = fmt.Fprintf(stdout,
		"wrote %d rows in %d shards + %d test rows to %s: %.1f MB, ~%d distinct keys, click rate %.3f\n"+
			"Bayes-optimal on test: AUC %s, log loss %.4f, accuracy %.4f\n"+
			"%.1fs, %.0f rows/s, %.1f MB/s\n",
		m.Rows, len(m.Files), m.TestRows, cfg.Out, float64(m.Bytes)/1e6, m.DistinctKeys, m.TrainPositiveRate,
		auc, m.TestBayesLogLoss, m.TestBayesAccuracy,
		secs, float64(m.Rows+m.TestRows)/secs, float64(m.Bytes)/1e6/secs)
	return err
}
