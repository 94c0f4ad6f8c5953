// Package mf is matrix factorisation on a paramserv cluster, written on the
// public API alone (Start, PullTables, PushPullRows, Done) as a user would
// write it: biased matrix factorisation of a ratings matrix, such as
// MovieLens 100K's.
//
// A rating r of item i by user u is predicted as
//
//	r̂ = μ + b_u + b_i + (p_u + |N(u)|^-½ Σ_{j∈N(u)} y_j)·q_i
//
// where μ is a dense variable on the ps (initialised to the mean training
// rating), and each user's row p_u with its bias b_u, and each item's q_i
// with b_i, are rows of Dim+1 floats of two sparse tables, "users" and
// "items", sharded across the ps by key. N(u) are the items u rated in the
// training data, and their rows y_j (Dim floats, a third table "implicit")
// say what having rated them tells of a user: this is Koren's SVD++ (2008);
// Config.NoImplicit leaves it out. Every worker reads its own part of the
// training ratings, in a new order each epoch; each step it pulls the rows
// of its batch's users and items and of the items its users rated (one
// round trip per ps), computes the
// gradient of the batch's squared error plus an L2 penalty on the rows it
// touches (lighter per rating for users and items with many ratings), and
// pushes the rows' gradients with μ's, which the ps apply with
// the job's optimizer (Adagrad by default). At the end the chief computes
// the RMSE of the test ratings, predictions clipped to the rating scale.
//
// Train runs one worker; the ps are paramserv processes:
//
//	paramserv local --ps=2 --workers=2 --model=mf --data_dir=DIR \
//	  --train_data=ml-100k/u1.base --test_data=ml-100k/u1.test
package mf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv"
)

// Rating is one rating of an item by a user.
type Rating struct {
	User, Item uint64
	Value      float32
}

// Config is one worker's view of an MF job. Zero values mean the defaults,
// which reach a test RMSE of about 0.907 on MovieLens 100K's u1 split (see
// the README for each split).
type Config struct {
	// TFConfig is the cluster in TF_CONFIG's form ("" reads TF_CONFIG).
	TFConfig string
	// TrainFile and TestFile hold tab-separated lines "user item rating
	// timestamp" (MovieLens' u.data layout); the timestamp may be absent.
	TrainFile, TestFile string

	Dim int     // factors per user and item (k): 20
	Reg float64 // L2 penalty on the factors: 0.1
	// RegExponent scales the penalty of a user's (item's) factors at each
	// of its ratings by (n/n̄)^-RegExponent, n its number of training
	// ratings and n̄ the mean: the penalty of the whole row then grows as
	// n^(1-RegExponent) rather than n. 0.5 by default (-1: none, the plain
	// per-rating penalty of SGD).
	RegExponent float64
	BiasReg     float64 // L2 penalty on the biases: 0.005
	// NoImplicit leaves out SVD++'s implicit feedback, which is on by
	// default: a user's factors are p_u + |N(u)|^-½ Σ_{j∈N(u)} y_j, N(u)
	// the items the user rated in the training data and y_j (Dim floats)
	// rows of a third table, "implicit", penalised as the factors are.
	NoImplicit bool
	InitStddev float64 // initial rows' standard deviation: 0.01
	BatchSize  int     // ratings per step on each worker: 100
	TrainSteps int64   // global steps: 15000 (about 19 epochs of u1.base)
	// Optimizer runs on the ps: Adagrad at 0.05 by default.
	Optimizer paramserv.Optimizer
	Seed      int64
	Sync      bool

	// MinRating and MaxRating clip predictions: 1 and 5 by default.
	MinRating, MaxRating float32

	CheckpointDir   string
	SaveSteps       int64
	StepsToValidate int64 // log a progress line every this many local steps: 1000
	// ResultFile, if set, is where the chief writes the JSON summary
	// (test_rmse among its keys).
	ResultFile string

	StartupTimeout, RecoveryTimeout time.Duration
	Logf                            func(format string, args ...any)
	// MetricsAddr is paramserv.Config's: where the worker serves its
	// metrics ("" reads PARAMSERV_METRICS_ADDR, "off" serves none).
	MetricsAddr string
}

// Defaults returns cfg with its zero fields set to the defaults.
func (cfg Config) Defaults() Config {
	setF := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if cfg.Dim == 0 {
		cfg.Dim = 20
	}
	setF(&cfg.Reg, 0.1)
	setF(&cfg.RegExponent, 0.5)
	cfg.RegExponent = max(cfg.RegExponent, 0)
	setF(&cfg.BiasReg, 0.005)
	setF(&cfg.InitStddev, 0.01)
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 100
	}
	if cfg.TrainSteps == 0 {
		cfg.TrainSteps = 15000
	}
	if cfg.Optimizer.Name == "" {
		cfg.Optimizer.Name = "adagrad"
	}
	setF(&cfg.Optimizer.LearningRate, 0.05)
	if cfg.MinRating == 0 && cfg.MaxRating == 0 {
		cfg.MinRating, cfg.MaxRating = 1, 5
	}
	if cfg.StepsToValidate == 0 {
		cfg.StepsToValidate = 1000
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
	TestRMSE     float64            `json:"test_rmse"`
	TrainRMSE    float64            `json:"train_rmse"` // over this worker's last steps
	Metrics      map[string]float64 `json:"metrics"`
	Dim          int                `json:"dim"`
	Optimizer    string             `json:"optimizer"`
	LearningRate float64            `json:"learning_rate"`
}

// ErrInput is wrapped by the errors of input to fix: a ratings file that
// is missing or malformed, a size out of range.
var ErrInput = errors.New("mf: bad input")

// ReadRatings reads a ratings file: one rating a line, "user item rating"
// then anything, separated by tabs or spaces. Errors name the file and line.
func ReadRatings(path string) ([]Rating, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: ratings: %w", ErrInput, err)
	}
	defer f.Close()
	var out []Rating
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fs := strings.Fields(text)
		if len(fs) < 3 {
			return nil, fmt.Errorf("%w: %s:%d: %q: want user, item and rating separated by tabs", ErrInput, path, line, text)
		}
		u, err1 := strconv.ParseUint(fs[0], 10, 64)
		i, err2 := strconv.ParseUint(fs[1], 10, 64)
		r, err3 := strconv.ParseFloat(fs[2], 32)
		if err1 != nil || err2 != nil || err3 != nil || math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("%w: %s:%d: %q: want an integer user id, an integer item id and a numeric rating", ErrInput, path, line, text)
		}
		out = append(out, Rating{User: u, Item: i, Value: float32(r)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mf: %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s: no ratings", ErrInput, path)
	}
	return out, nil
}

// Train runs one worker of an MF job until the global step reaches
// cfg.TrainSteps; the chief then evaluates on cfg.TestFile and returns
// (and writes) the result. Other workers return a result without metrics.
func Train(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.Defaults()
	if cfg.Dim < 1 || cfg.BatchSize < 1 || cfg.TrainSteps < 1 || cfg.Reg < 0 || cfg.BiasReg < 0 {
		return Result{}, fmt.Errorf("%w: dim %d, batch size %d, train steps %d, reg %g, bias reg %g: want positive sizes and penalties >= 0",
			ErrInput, cfg.Dim, cfg.BatchSize, cfg.TrainSteps, cfg.Reg, cfg.BiasReg)
	}
	train, err := ReadRatings(cfg.TrainFile)
	if err != nil {
		return Result{}, err
	}
	if cfg.TestFile != "" {
		if _, err := os.Stat(cfg.TestFile); err != nil { // found now, not after training
			return Result{}, fmt.Errorf("%w: test ratings: %w", ErrInput, err)
		}
	}
	var mean float64
	for _, r := range train {
		mean += float64(r.Value)
	}
	mean /= float64(len(train))

	m := newModel(cfg)
	m.weighReg(train)
	tables := []paramserv.Table{
		{Name: "users", Dim: cfg.Dim + 1, Init: "normal", InitStddev: cfg.InitStddev, Seed: uint64(cfg.Seed)},
		{Name: "items", Dim: cfg.Dim + 1, Init: "normal", InitStddev: cfg.InitStddev, Seed: uint64(cfg.Seed) + 1},
	}
	if !cfg.NoImplicit {
		m.rateds(train)
		tables = append(tables, paramserv.Table{Name: "implicit", Dim: cfg.Dim, Init: "normal", InitStddev: cfg.InitStddev, Seed: uint64(cfg.Seed) + 2})
	}
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  cfg.TFConfig,
		Variables: []paramserv.Variable{{Name: "mu", Shape: []int{1}}},
		Tables:    tables,
		Optimizer: cfg.Optimizer, Sync: cfg.Sync,
		CheckpointDir: cfg.CheckpointDir, SaveSteps: cfg.SaveSteps,
		StartupTimeout: cfg.StartupTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logf: cfg.Logf,
		MetricsAddr: cfg.MetricsAddr,
	}, paramserv.Params{"mu": {float32(mean)}})
	if err != nil {
		return Result{}, err
	}
	defer w.Close()

	// This worker's part of the ratings.
	var mine []Rating
	for i, r := range train {
		if i%w.NumWorkers() == w.Index() {
			mine = append(mine, r)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(w.Index())))
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		return Result{}, err
	}
	start := time.Now()
	var local int64
	var sqErr float64
	var seen int
	pos := len(mine)
	for w.Step() < cfg.TrainSteps {
		if pos+cfg.BatchSize > len(mine) {
			rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			pos = 0
		}
		batch := mine[pos:min(pos+cfg.BatchSize, len(mine))]
		pos += len(batch)
		m.gather(batch)
		if err := w.PullTables(ctx, m.rows()); err != nil {
			return Result{}, err
		}
		se := m.gradients(batch, params["mu"][0], grads)
		if len(batch) > 0 {
			w.ReportLoss(se/float64(len(batch)), len(batch)) // mean squared error: the metrics and paramserv local's progress line
		}
		sqErr, seen = sqErr+se, seen+len(batch)
		if _, err := w.PushPullRows(ctx, grads, params, m.gradRows()); err != nil {
			return Result{}, err
		}
		local++
		if local%cfg.StepsToValidate == 0 {
			cfg.Logf("mf: worker %d: local step %d, global step %d, train RMSE %.4f (last %d ratings), mu %.3f",
				w.Index(), local, w.Step(), math.Sqrt(sqErr/float64(seen)), seen, params["mu"][0])
			sqErr, seen = 0, 0
		}
	}
	elapsed := time.Since(start)
	res := Result{Model: "mf", GlobalStep: w.Step(), LocalSteps: local, Workers: w.NumWorkers(),
		ElapsedS: elapsed.Seconds(), Dim: cfg.Dim, Optimizer: cfg.Optimizer.Name, LearningRate: cfg.Optimizer.LearningRate}
	if seen > 0 {
		res.TrainRMSE = math.Sqrt(sqErr / float64(seen))
	}
	if elapsed > 0 {
		res.ExamplesPerS = float64(local) * float64(cfg.BatchSize) * float64(w.NumWorkers()) / elapsed.Seconds()
	}
	if w.IsChief() && cfg.TestFile != "" {
		test, err := ReadRatings(cfg.TestFile)
		if err != nil {
			return res, err
		}
		if _, err := w.Pull(ctx, params); err != nil {
			return res, err
		}
		rmse, err := m.rmse(ctx, w, test, params["mu"][0])
		if err != nil {
			return res, err
		}
		res.TestRMSE = rmse
		res.Metrics = map[string]float64{"test_rmse": rmse, "train_rmse": res.TrainRMSE}
		cfg.Logf("mf: final: global step %d, test RMSE %.4f on %d ratings of %s", w.Step(), rmse, len(test), cfg.TestFile)
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

// model holds one worker's buffers: the batch's distinct users and items,
// their rows and their gradients.
type model struct {
	cfg                 Config
	dim                 int
	users, items        index
	uRows, iRows        []float32
	uGrad, iGrad        []float32
	pulled              []paramserv.Rows
	pushed              []paramserv.Rows
	reg, biasReg        float32
	minRating, maxRatig float32
	// userReg and itemReg are each row's penalty per rating
	// (RegExponent); a row missing (not in the training data) has Reg.
	userReg, itemReg map[uint64]float32

	// Implicit feedback (unless cfg.NoImplicit): each user's rated items, the
	// batch's union of them with their rows and gradients, and per batch
	// user z_u = |N(u)|^-½ Σ y_j and the gradient with respect to z_u.
	// Items are numbered densely (itemKey) so that a batch's union is
	// built with slot, an item's place in implKeys or -1.
	rated        map[uint64][]int32
	itemKey      []uint64
	slot         []int32
	implKeys     []uint64
	implDense    []int32
	yRows, yGrad []float32
	z, gz        []float32
	cnt          []float32 // the batch's ratings per batch user
}

// rateds records each user's rated items, numbered densely.
func (m *model) rateds(train []Rating) {
	m.rated = map[uint64][]int32{}
	ids := map[uint64]int32{}
	for _, r := range train {
		id, ok := ids[r.Item]
		if !ok {
			id = int32(len(m.itemKey))
			ids[r.Item] = id
			m.itemKey = append(m.itemKey, r.Item)
		}
		m.rated[r.User] = append(m.rated[r.User], id)
	}
	m.slot = make([]int32, len(m.itemKey))
	for i := range m.slot {
		m.slot[i] = -1
	}
}

// weighReg computes every row's penalty per rating from the training
// ratings' counts.
func (m *model) weighReg(train []Rating) {
	users, items := map[uint64]float64{}, map[uint64]float64{}
	for _, r := range train {
		users[r.User]++
		items[r.Item]++
	}
	weigh := func(counts map[uint64]float64) map[uint64]float32 {
		mean := float64(len(train)) / float64(len(counts))
		out := make(map[uint64]float32, len(counts))
		for k, n := range counts {
			out[k] = float32(m.cfg.Reg * math.Pow(n/mean, -m.cfg.RegExponent))
		}
		return out
	}
	m.userReg, m.itemReg = weigh(users), weigh(items)
}

// regOf is the penalty per rating of a row: its own, or Reg.
func (m *model) regOf(regs map[uint64]float32, key uint64) float32 {
	if r, ok := regs[key]; ok {
		return r
	}
	return m.reg
}

// index numbers the distinct keys of a batch in order of appearance.
type index struct {
	keys []uint64
	pos  map[uint64]int
}

func (x *index) reset() {
	x.keys = x.keys[:0]
	clear(x.pos)
}

func (x *index) add(k uint64) int {
	if p, ok := x.pos[k]; ok {
		return p
	}
	x.pos[k] = len(x.keys)
	x.keys = append(x.keys, k)
	return len(x.keys) - 1
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg, dim: cfg.Dim + 1,
		users: index{pos: map[uint64]int{}}, items: index{pos: map[uint64]int{}},
		reg: float32(cfg.Reg), biasReg: float32(cfg.BiasReg), minRating: cfg.MinRating, maxRatig: cfg.MaxRating}
}

// gather indexes the batch's users and items and sizes the row buffers.
func (m *model) gather(batch []Rating) {
	m.users.reset()
	m.items.reset()
	for _, r := range batch {
		m.users.add(r.User)
		m.items.add(r.Item)
	}
	grow := func(b []float32, n int) []float32 {
		if cap(b) < n {
			return make([]float32, n)
		}
		return b[:n]
	}
	m.uRows, m.uGrad = grow(m.uRows, len(m.users.keys)*m.dim), grow(m.uGrad, len(m.users.keys)*m.dim)
	m.iRows, m.iGrad = grow(m.iRows, len(m.items.keys)*m.dim), grow(m.iGrad, len(m.items.keys)*m.dim)
	if m.rated != nil {
		for _, d := range m.implDense {
			m.slot[d] = -1
		}
		m.implKeys, m.implDense = m.implKeys[:0], m.implDense[:0]
		for _, u := range m.users.keys {
			for _, d := range m.rated[u] {
				if m.slot[d] < 0 {
					m.slot[d] = int32(len(m.implKeys))
					m.implKeys = append(m.implKeys, m.itemKey[d])
					m.implDense = append(m.implDense, d)
				}
			}
		}
		k := m.dim - 1
		m.yRows, m.yGrad = grow(m.yRows, len(m.implKeys)*k), grow(m.yGrad, len(m.implKeys)*k)
		m.z, m.gz = grow(m.z, len(m.users.keys)*k), grow(m.gz, len(m.users.keys)*k)
	}
}

// implicitSums sets z_u = |N(u)|^-½ Σ_{j∈N(u)} y_j for the batch's users
// from the pulled implicit rows (zero for a user without training ratings).
func (m *model) implicitSums() {
	if m.rated == nil {
		return
	}
	k := m.dim - 1
	clear(m.z)
	for ui, u := range m.users.keys {
		z := m.z[ui*k : (ui+1)*k]
		n := m.rated[u]
		if len(n) == 0 {
			continue
		}
		for _, d := range n {
			pos := int(m.slot[d])
			y := m.yRows[pos*k : (pos+1)*k]
			for c := range z {
				z[c] += y[c]
			}
		}
		sc := float32(1 / math.Sqrt(float64(len(n))))
		for c := range z {
			z[c] *= sc
		}
	}
}

func (m *model) rows() []paramserv.Rows {
	m.pulled = append(m.pulled[:0],
		paramserv.Rows{Table: "users", Keys: m.users.keys, Values: m.uRows},
		paramserv.Rows{Table: "items", Keys: m.items.keys, Values: m.iRows})
	if m.rated != nil && len(m.implKeys) > 0 {
		m.pulled = append(m.pulled, paramserv.Rows{Table: "implicit", Keys: m.implKeys, Values: m.yRows})
	}
	return m.pulled
}

func (m *model) gradRows() []paramserv.Rows {
	m.pushed = append(m.pushed[:0],
		paramserv.Rows{Table: "users", Keys: m.users.keys, Values: m.uGrad},
		paramserv.Rows{Table: "items", Keys: m.items.keys, Values: m.iGrad})
	if m.rated != nil && len(m.implKeys) > 0 {
		m.pushed = append(m.pushed, paramserv.Rows{Table: "implicit", Keys: m.implKeys, Values: m.yGrad})
	}
	return m.pushed
}

// predict is μ + b_u + b_i + p_u·q_i for rows p and q (factors, then the
// bias in the last place).
func (m *model) predict(mu float32, p, q []float32) float32 {
	k := m.dim - 1
	s := mu + p[k] + q[k]
	for j := 0; j < k; j++ {
		s += p[j] * q[j]
	}
	return s
}

// predictZ is predict with the user's factors p + z (z nil: p alone).
func (m *model) predictZ(mu float32, p, q, z []float32) float32 {
	if z == nil {
		return m.predict(mu, p, q)
	}
	k := m.dim - 1
	s := mu + p[k] + q[k]
	for j := 0; j < k; j++ {
		s += (p[j] + z[j]) * q[j]
	}
	return s
}

// zOf is the batch user ui's z_u, nil without implicit feedback.
func (m *model) zOf(ui int) []float32 {
	if m.rated == nil {
		return nil
	}
	k := m.dim - 1
	return m.z[ui*k : (ui+1)*k]
}

// gradients writes the gradient of Σ ½(r̂-r)² + ½(λ_u|p_u|²+λ_i|q_i|²) +
// ½λ_b(b_u²+b_i²) over the batch (the penalty once per rating, as in
// per-rating SGD, λ_u and λ_i each row's, see RegExponent) into the row
// gradients and grads["mu"], and returns the batch's sum of squared
// errors. With implicit feedback r̂ uses p_u + z_u, and each rating adds
// ½λ|N(u)|^-½ Σ_{j∈N(u)} |y_j|², λ = Reg, the penalty of SVD++'s SGD
// spread over the user's items' rows by the same weight as z_u.
func (m *model) gradients(batch []Rating, mu float32, grads paramserv.Params) float64 {
	clear(m.uGrad)
	clear(m.iGrad)
	k := m.dim - 1
	m.implicitSums()
	if m.rated != nil {
		clear(m.gz)
		clear(m.yGrad)
	}
	m.cnt = append(m.cnt[:0], make([]float32, len(m.users.keys))...)
	var gmu float32
	var se float64
	for _, r := range batch {
		ui, ii := m.users.pos[r.User], m.items.pos[r.Item]
		p, q := m.uRows[ui*m.dim:(ui+1)*m.dim], m.iRows[ii*m.dim:(ii+1)*m.dim]
		gp, gq := m.uGrad[ui*m.dim:(ui+1)*m.dim], m.iGrad[ii*m.dim:(ii+1)*m.dim]
		z := m.zOf(ui)
		e := m.predictZ(mu, p, q, z)
		e -= r.Value
		se += float64(e) * float64(e)
		ru, ri := m.regOf(m.userReg, r.User), m.regOf(m.itemReg, r.Item)
		for j := 0; j < k; j++ {
			pj := p[j]
			if z != nil {
				pj += z[j]
				m.gz[ui*k+j] += e * q[j]
			}
			gp[j] += e*q[j] + ru*p[j]
			gq[j] += e*pj + ri*q[j]
		}
		m.cnt[ui]++
		gp[k] += e + m.biasReg*p[k]
		gq[k] += e + m.biasReg*q[k]
		gmu += e
	}
	grads["mu"][0] = gmu
	if m.rated != nil {
		ry := float32(m.cfg.Reg)
		for ui, u := range m.users.keys {
			n := m.rated[u]
			if len(n) == 0 {
				continue
			}
			sc := float32(1 / math.Sqrt(float64(len(n))))
			gz := m.gz[ui*k : (ui+1)*k]
			for _, d := range n {
				pos := int(m.slot[d])
				y, gy := m.yRows[pos*k:(pos+1)*k], m.yGrad[pos*k:(pos+1)*k]
				for c := range gy {
					gy[c] += sc*gz[c] + ry*m.cnt[ui]*sc*y[c]
				}
			}
		}
	}
	return se
}

// rmse pulls the rows of the test ratings' users and items, in chunks, and
// returns the RMSE of the clipped predictions.
func (m *model) rmse(ctx context.Context, w *paramserv.Worker, test []Rating, mu float32) (float64, error) {
	var se float64
	const chunk = 10000
	for lo := 0; lo < len(test); lo += chunk {
		batch := test[lo:min(lo+chunk, len(test))]
		m.gather(batch)
		if err := w.PullTables(ctx, m.rows()); err != nil {
			return 0, err
		}
		m.implicitSums()
		for _, r := range batch {
			ui, ii := m.users.pos[r.User], m.items.pos[r.Item]
			pred := m.predictZ(mu, m.uRows[ui*m.dim:(ui+1)*m.dim], m.iRows[ii*m.dim:(ii+1)*m.dim], m.zOf(ui))
			pred = min(max(pred, m.minRating), m.maxRatig)
			e := float64(pred - r.Value)
			se += e * e
		}
	}
	return math.Sqrt(se / float64(len(test))), nil
}
