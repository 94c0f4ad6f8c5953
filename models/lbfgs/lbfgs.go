// Package lbfgs trains L2-regularised logistic regression by full-batch
// L-BFGS on a paramserv cluster, written on paramserv's public API only, as
// a user's program would be.
//
// It minimises liblinear's objective for train -s 0 (with its default
// C = 1 and no bias term):
//
//	f(w) = ½‖w‖² + C Σᵢ log(1 + exp(−yᵢ w·xᵢ))
//
// Each worker holds a part of the training rows. An evaluation of f and
// its gradient at a point is one synchronous step in which every worker
// pushes the sums over its part and the ps add them up; the chief then runs
// L-BFGS (two-loop recursion, memory M) and a backtracking line search on
// the sums and sends the next point to every worker in a second
// synchronous step. The direction and line search run on the chief: the ps
// only aggregate, with the update rule they have (sgd), and no server-side
// code is needed; the chief's work per iteration is O(M·d), small beside a
// pass over the data.
//
// The ps hold float32 values. Sums are kept precise where it matters:
// the data part of the gradient is sent as is (its float32 rounding is far
// below what the line search and the stopping test need), and the loss as
// the change since the last accepted point, so that the line search
// compares objective values without the rounding of the whole sum (about
// 1e-7 of it). The point the workers evaluate is the one the ps hold, so
// every worker and the chief agree on it bit for bit.
package lbfgs

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv"
)

// Config is one worker's view of the job; every worker gets the same.
type Config struct {
	// TFConfig is the cluster and this task in TF_CONFIG's form ("" reads
	// the environment variable).
	TFConfig string
	// Train and Test are LIBSVM files (label ±1 or 0/1, 1-based
	// index:value pairs); Test may be "". NumFeatures is d: indices above
	// it are an error (0: the largest index in Train).
	Train, Test string
	NumFeatures int

	C float64 // the loss's weight (1, liblinear's default)
	M int     // pairs of L-BFGS memory (20)
	// MaxIterations bounds the L-BFGS iterations (1000); training stops
	// earlier once ‖∇f‖ ≤ GradTol·‖∇f(0)‖ (1e-7), or once the last 10
	// iterations lowered f by no more than RelTol·f (1e-12): the float32
	// values on the ps bound how close to the optimum the iterates get.
	MaxIterations   int
	GradTol, RelTol float64

	// ResultFile, if set, is where the chief writes the JSON summary:
	// objective, iterations, evaluations, grad_norm, test_accuracy, ...
	ResultFile string
	Logf       func(format string, args ...any)
	// MetricsAddr is paramserv.Config's: where the worker serves its
	// metrics ("" reads PARAMSERV_METRICS_ADDR, "off" serves none).
	MetricsAddr string
}

func (c *Config) defaults() {
	if c.C <= 0 {
		c.C = 1
	}
	if c.M <= 0 {
		c.M = 20
	}
	if c.MaxIterations <= 0 {
		c.MaxIterations = 1000
	}
	if c.GradTol <= 0 {
		c.GradTol = 1e-7
	}
	if c.RelTol <= 0 {
		c.RelTol = 1e-12
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Data is rows of sparse features with labels ±1.
type Data struct {
	Y   []float64
	Ptr []int // row i is Idx[Ptr[i]:Ptr[i+1]], 0-based
	Idx []int32
	Val []float64
	D   int // the largest index + 1
}

// Rows is the number of rows.
func (d *Data) Rows() int { return len(d.Y) }

// ReadLIBSVM reads a LIBSVM file, keeping the rows i with i%every == part.
// Errors name the file, line and token.
func ReadLIBSVM(path string, numFeatures, every, part int) (*Data, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lbfgs: %w", err)
	}
	defer f.Close()
	d := &Data{Ptr: []int{0}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	row := 0
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		row++
		if (row-1)%every != part {
			continue
		}
		bad := func(tok, why string) error {
			return fmt.Errorf("lbfgs: %s:%d: token %q: %s (want LIBSVM: label index:value ...)", path, line, tok, why)
		}
		y, err := strconv.ParseFloat(fields[0], 64)
		switch {
		case err != nil:
			return nil, bad(fields[0], "label is not a number")
		case y == 1:
		case y == -1 || y == 0:
			y = -1
		default:
			return nil, bad(fields[0], "label is not ±1 or 0/1")
		}
		for _, tok := range fields[1:] {
			a, b, ok := strings.Cut(tok, ":")
			idx, err1 := strconv.Atoi(a)
			v, err2 := strconv.ParseFloat(b, 64)
			switch {
			case !ok || err1 != nil:
				return nil, bad(tok, "not index:value")
			case err2 != nil || math.IsNaN(v) || math.IsInf(v, 0):
				return nil, bad(tok, "value is not a finite number")
			case idx < 1 || idx > math.MaxInt32 || (numFeatures > 0 && idx > numFeatures):
				top := numFeatures
				if top <= 0 {
					top = math.MaxInt32
				}
				return nil, bad(tok, fmt.Sprintf("index out of 1..%d", top))
			}
			d.Idx = append(d.Idx, int32(idx-1))
			d.Val = append(d.Val, v)
			d.D = max(d.D, idx)
		}
		d.Y = append(d.Y, y)
		d.Ptr = append(d.Ptr, len(d.Idx))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lbfgs: %s: %w", path, err)
	}
	if numFeatures > 0 {
		d.D = numFeatures
	}
	return d, nil
}

// LossGrad returns Σ log(1+exp(−y w·x)) over the rows and adds the
// gradient of that sum to grad (len(w)); indices beyond len(w) count as
// zero weights.
func (d *Data) LossGrad(w, grad []float64) float64 {
	var loss float64
	for i, y := range d.Y {
		lo, hi := d.Ptr[i], d.Ptr[i+1]
		var z float64
		for j := lo; j < hi; j++ {
			if k := int(d.Idx[j]); k < len(w) {
				z += w[k] * d.Val[j]
			}
		}
		m := y * z
		if m >= 0 {
			loss += math.Log1p(math.Exp(-m))
		} else {
			loss += -m + math.Log1p(math.Exp(m))
		}
		if grad != nil {
			c := -y / (1 + math.Exp(m)) // d/dz of the loss
			for j := lo; j < hi; j++ {
				if k := int(d.Idx[j]); k < len(grad) {
					grad[k] += c * d.Val[j]
				}
			}
		}
	}
	return loss
}

// Objective is f(w) over all of d, in float64.
func Objective(d *Data, w []float64, C float64) float64 {
	var r float64
	for _, x := range w {
		r += x * x
	}
	return 0.5*r + C*d.LossGrad(w, nil)
}

// Accuracy is the share of rows whose sign of w·x is the label.
func (d *Data) Accuracy(w []float64) float64 {
	right := 0
	for i, y := range d.Y {
		var z float64
		for j := d.Ptr[i]; j < d.Ptr[i+1]; j++ {
			if k := int(d.Idx[j]); k < len(w) {
				z += w[k] * d.Val[j]
			}
		}
		if (z > 0) == (y > 0) {
			right++
		}
	}
	return float64(right) / float64(len(d.Y))
}

// Names of the variables on the ps.
const (
	point = "w"   // the point every worker evaluates next
	sums  = "sum" // d gradient sums, the loss's change, the final loss's 4 limbs
	ctl   = "ctl" // [accepted points, stop]
)

// Result is what the chief reports.
type Result struct {
	Objective    float64
	Iterations   int // accepted L-BFGS steps
	Evaluations  int // evaluations of f and ∇f over the whole data
	GradNorm     float64
	W            []float64
	TestAccuracy float64 // NaN without Test
}

// Run runs one worker of the job until the chief stops it; the chief
// returns the Result (the others nil). A ps task is not run here: the ps
// are paramserv processes (or paramserv.ServePS).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	start := time.Now()
	w, d, err := startWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	data, err := ReadLIBSVM(cfg.Train, d, w.NumWorkers(), w.Index())
	if err != nil {
		return nil, err
	}
	cfg.Logf("lbfgs: worker %d of %d: %d rows, %d features", w.Index(), w.NumWorkers(), data.Rows(), d)
	if w.NumWorkers() > 256 {
		return nil, fmt.Errorf("lbfgs: %d workers: the exact final objective takes at most 256", w.NumWorkers())
	}
	r := &run{w: w, data: data, d: d, R: float64(w.NumWorkers()), params: w.NewParams(), grads: w.NewParams()}
	if _, err := w.Pull(ctx, r.params); err != nil {
		return nil, err
	}
	// The L-BFGS memory and every worker's last loss live in memory only:
	// a worker that restarts cannot rejoin. A step above 0 means every
	// worker had started already (a synchronous step waits for all).
	if w.Step() > 0 {
		return nil, fmt.Errorf("lbfgs: worker %d started at global step %d: a worker cannot rejoin full-batch L-BFGS (the chief's memory and each worker's last loss are lost with it); start the job again", w.Index(), w.Step())
	}
	if w.IsChief() {
		r.ch = newChief(cfg, d)
	}
	if err := r.iterate(ctx); err != nil {
		return nil, err
	}
	x := make([]float64, d)
	toFloat64(x, r.params[point])
	loss, err := r.exactLoss(ctx, x)
	if err != nil || r.ch == nil {
		return nil, err
	}
	r.ch.fk = 0.5*dot(x, x) + cfg.C*loss
	res := r.ch.result()
	if err := report(cfg, res, r.ch.why, w.Step(), time.Since(start)); err != nil {
		return nil, err
	}
	return res, w.Done(ctx)
}

// startWorker starts this worker on the job's three variables, of d features
// (cfg.NumFeatures, or as many as the training file has), and checks that
// the ps train synchronously.
func startWorker(ctx context.Context, cfg Config) (w *paramserv.Worker, d int, err error) {
	d = cfg.NumFeatures
	if d <= 0 {
		all, err := ReadLIBSVM(cfg.Train, 0, 1, 0)
		if err != nil {
			return nil, 0, err
		}
		d = all.D
	}
	w, err = paramserv.Start(ctx, paramserv.Config{
		TFConfig: cfg.TFConfig,
		Variables: []paramserv.Variable{
			{Name: point, Shape: []int{d}}, {Name: sums, Shape: []int{d + 1 + 4}}, {Name: ctl, Shape: []int{2}},
		},
		// A step sets p -= mean of the pushes; pushes are scaled by the
		// number of workers so that it is their sum.
		Optimizer:   paramserv.Optimizer{Name: "sgd", LearningRate: 1},
		Sync:        true,
		Logf:        cfg.Logf,
		MetricsAddr: cfg.MetricsAddr,
	}, paramserv.Params{point: make([]float32, d), sums: make([]float32, d+1+4), ctl: {0, 0}})
	if err != nil {
		return nil, 0, err
	}
	if !w.Sync() {
		w.Close()
		return nil, 0, fmt.Errorf("lbfgs: the ps train asynchronously; full-batch L-BFGS needs every worker's sums in each step (synchronous training)")
	}
	return w, d, nil
}

// run is one worker's part of the job once it has joined.
type run struct {
	w             *paramserv.Worker
	data          *Data
	d             int
	R             float64 // the number of workers, which scales each push to a sum
	ch            *chief  // nil on workers other than the chief
	params, grads paramserv.Params
}

// iterate runs the iterations until the chief says stop: in each, every
// worker pushes its part's sums at the ps's point, and the chief then
// pushes the next point.
func (r *run) iterate(ctx context.Context) error {
	R, d, params, grads := r.R, r.d, r.params, r.grads
	x := make([]float64, d)
	g := make([]float64, d)
	var ref, loss float64 // this part's loss at the last accepted point, and at the last point
	accepted := 0.0
	for {
		// Evaluation: every worker's gradient and loss change at the ps's point.
		toFloat64(x, params[point])
		clear(g)
		loss = r.data.LossGrad(x, g)
		s := grads[sums]
		for i := range g {
			s[i] = float32(-R * g[i])
		}
		s[d] = float32(-R * (loss - ref))
		if r.ch != nil { // and the chief clears the last sums: p -= mean(pushes) = p − (p − Σ)
			for i := range s {
				s[i] += float32(R * float64(params[sums][i]))
			}
		}
		clear(grads[point])
		clear(grads[ctl])
		if _, err := r.w.PushPull(ctx, grads, params); err != nil {
			return err
		}
		// The chief's step: the next point (or stop) for everyone.
		clear(grads[sums])
		if r.ch != nil {
			next, c := r.ch.step(x, params[sums])
			for i := range next {
				grads[point][i] = float32(R * (float64(params[point][i]) - next[i]))
			}
			for i := range c {
				grads[ctl][i] = float32(R * (float64(params[ctl][i]) - c[i]))
			}
		}
		if _, err := r.w.PushPull(ctx, grads, params); err != nil {
			return err
		}
		if a := float64(params[ctl][0]); a != accepted {
			accepted, ref = a, loss
		}
		if params[ctl][1] != 0 {
			return nil
		}
	}
}

// exactLoss sums every worker's loss at the final point x exactly: each
// pushes its loss as a fixed-point integer in four 16-bit limbs, whose sums
// the ps hold exactly (see exactLimbs). The chief gets the sum; the others
// end their part of the job and get 0.
func (r *run) exactLoss(ctx context.Context, x []float64) (float64, error) {
	limbs, err := exactLimbs(r.data.LossGrad(x, nil))
	if err != nil {
		return 0, err
	}
	for _, v := range r.grads {
		clear(v)
	}
	for j, l := range limbs {
		r.grads[sums][r.d+1+j] = float32(l)
	}
	if _, err := r.w.PushPull(ctx, r.grads, r.params); err != nil {
		return 0, err
	}
	if r.ch == nil {
		return 0, r.w.Done(ctx)
	}
	var loss float64
	for j := range limbs {
		// p = 0 − mean(pushes): the sum is −p·R, an integer below 2^24.
		loss += math.Round(-float64(r.params[sums][r.d+1+j])*r.R) * math.Ldexp(1, 16*j-limbScale)
	}
	return loss, nil
}

// report fills in the chief's test accuracy (with cfg.Test), logs the
// result and writes cfg.ResultFile.
func report(cfg Config, res *Result, why string, step int64, elapsed time.Duration) error {
	res.TestAccuracy = math.NaN()
	if cfg.Test != "" {
		test, err := ReadLIBSVM(cfg.Test, len(res.W), 1, 0)
		if err != nil {
			return err
		}
		res.TestAccuracy = test.Accuracy(res.W)
	}
	cfg.Logf("lbfgs: stopped (%s) after %d iterations (%d evaluations): objective %.12g, ‖∇f‖ %.3g, test accuracy %.4f; %s",
		why, res.Iterations, res.Evaluations, res.Objective, res.GradNorm, res.TestAccuracy, elapsed.Round(time.Millisecond))
	if cfg.ResultFile == "" {
		return nil
	}
	r := map[string]any{
		"model": "logreg_lbfgs", "mode": "sync", "objective": res.Objective, "iterations": res.Iterations,
		"evaluations": res.Evaluations, "grad_norm": res.GradNorm, "C": cfg.C, "stopped": why,
		"global_step": step, "elapsed_s": elapsed.Seconds(),
	}
	if !math.IsNaN(res.TestAccuracy) {
		r["test_accuracy"] = res.TestAccuracy
	}
	return paramserv.WriteResultFile(cfg.ResultFile, r)
}

// limbScale: a loss is sent as an integer number of 2^-24.
const limbScale = 24

// exactLimbs writes loss (≥ 0, below 2^40) as round(loss·2^24) in four
// 16-bit limbs, least significant first. Each is an integer below 2^16,
// so the sum of up to 256 workers' limbs is an integer below 2^24, which
// float32 holds exactly, and the mean the ps take of them keeps it
// recoverable (round(mean·R)).
func exactLimbs(loss float64) ([4]float64, error) {
	var l [4]float64
	if !(loss >= 0 && loss < 1<<40) {
		return l, fmt.Errorf("lbfgs: loss %g out of the range [0, 2^40) the exact final sum takes", loss)
	}
	n := uint64(math.Round(loss * (1 << limbScale)))
	for j := range l {
		l[j] = float64(n >> (16 * j) & 0xffff)
	}
	return l, nil
}

// chief is the L-BFGS state: the last accepted point and its objective and
// gradient, the memory, and the line search under way.
type chief struct {
	cfg  Config
	d    int
	iter int // accepted steps
	eval int
	why  string

	wk, gk     []float64 // accepted point and gradient
	lossK, fk  float64   // C-free loss sum and objective there
	g0         float64   // ‖∇f‖ at the start
	dir        []float64
	t, gtd     float64 // step and ∇fᵀd of the line search under way
	backtracks int
	s, y       [][]float64
	rho        []float64
	accepted   float64   // ctl[0]
	history    []float64 // f at every accepted point
}

func newChief(cfg Config, d int) *chief { return &chief{cfg: cfg, d: d} }

// step takes the sums at the point x just evaluated and returns the next
// point and control values.
func (c *chief) step(x []float64, sum []float32) (next []float64, ctl []float64) {
	c.eval++
	C := c.cfg.C
	g := make([]float64, c.d)
	for i := range g {
		g[i] = x[i] + C*float64(sum[i])
	}
	dLoss := float64(sum[c.d])
	if c.wk == nil { // the first point
		c.wk, c.gk, c.lossK = clone(x), g, dLoss
		c.fk = 0.5*dot(x, x) + C*dLoss
		c.g0 = math.Sqrt(dot(g, g))
		c.accepted = 1
		c.history = append(c.history, c.fk)
		return c.newDirection()
	}
	// f(x) − f(wk), from the loss's change: no rounding of the whole sum.
	df := 0.5*(dot(x, x)-dot(c.wk, c.wk)) + C*dLoss
	sk := sub(x, c.wk)
	if df <= 1e-4*dot(c.gk, sk) {
		yk := sub(g, c.gk)
		if sy := dot(sk, yk); sy > 1e-12*dot(yk, yk) {
			if len(c.s) == c.cfg.M {
				c.s, c.y, c.rho = c.s[1:], c.y[1:], c.rho[1:]
			}
			c.s, c.y, c.rho = append(c.s, sk), append(c.y, yk), append(c.rho, 1/sy)
		}
		c.wk, c.gk = clone(x), g
		c.lossK += dLoss
		c.fk += df
		c.iter++
		c.accepted++
		c.history = append(c.history, c.fk)
		if c.iter%10 == 0 || c.iter < 5 {
			c.cfg.Logf("lbfgs: iteration %d: objective %.12g, ‖∇f‖ %.3g, step %.3g (%d evaluations)", c.iter, c.fk, math.Sqrt(dot(g, g)), c.t, c.eval)
		}
		return c.newDirection()
	}
	c.backtracks++
	if c.backtracks > 50 {
		return c.stop("the line search found no decrease")
	}
	c.t /= 2
	return c.trial(), []float64{c.accepted, 0}
}

// newDirection checks the stopping test at the accepted point, then
// starts a line search along the L-BFGS direction.
func (c *chief) newDirection() ([]float64, []float64) {
	gn := math.Sqrt(dot(c.gk, c.gk))
	switch {
	case gn <= c.cfg.GradTol*c.g0:
		return c.stop(fmt.Sprintf("‖∇f‖ ≤ %g·‖∇f(0)‖", c.cfg.GradTol))
	case c.iter >= 10 && c.history[c.iter-10]-c.fk <= c.cfg.RelTol*math.Abs(c.fk):
		return c.stop(fmt.Sprintf("f fell by ≤ %g·f in 10 iterations", c.cfg.RelTol))
	case c.iter >= c.cfg.MaxIterations:
		return c.stop("the iteration limit")
	}
	// Two-loop recursion: dir = −H·g.
	q := clone(c.gk)
	a := make([]float64, len(c.s))
	for i := len(c.s) - 1; i >= 0; i-- {
		a[i] = c.rho[i] * dot(c.s[i], q)
		axpy(-a[i], c.y[i], q)
	}
	gamma := 1.0
	if n := len(c.s); n > 0 {
		gamma = dot(c.s[n-1], c.y[n-1]) / dot(c.y[n-1], c.y[n-1])
	} else {
		gamma = 1 / gn // the first step: unit length
	}
	for i := range q {
		q[i] *= gamma
	}
	for i := range c.s {
		b := c.rho[i] * dot(c.y[i], q)
		axpy(a[i]-b, c.s[i], q)
	}
	for i := range q {
		q[i] = -q[i]
	}
	c.dir, c.t, c.backtracks = q, 1, 0
	c.gtd = dot(c.gk, q)
	return c.trial(), []float64{c.accepted, 0}
}

func (c *chief) trial() []float64 {
	x := clone(c.wk)
	axpy(c.t, c.dir, x)
	return x
}

func (c *chief) stop(why string) ([]float64, []float64) {
	c.why = why
	return clone(c.wk), []float64{c.accepted, 1}
}

func (c *chief) result() *Result {
	return &Result{Objective: c.fk, Iterations: c.iter, Evaluations: c.eval, GradNorm: math.Sqrt(dot(c.gk, c.gk)), W: c.wk}
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func axpy(a float64, x, y []float64) {
	for i := range x {
		y[i] += a * x[i]
	}
}

func sub(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func clone(a []float64) []float64 { return append([]float64(nil), a...) }

func toFloat64(dst []float64, src []float32) {
	for i, v := range src {
		dst[i] = float64(v)
	}
}
