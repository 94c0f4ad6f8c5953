package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// Kind is a kind of case.
type Kind string

// The kinds of case.
const (
	Tiny   Kind = "tiny"   // one float32
	Dense  Kind = "dense"  // one dense variable of Case.Bytes
	Sparse Kind = "sparse" // a table of width Case.Dim, Case.Keys keys per operation
	Mem    Kind = "mem"    // a dense variable and a table together, for the memory run
)

// Op is an operation.
type Op string

// The operations.
const (
	Push     Op = "push"
	Pull     Op = "pull"
	PushPull Op = "pushpull"
)

// Ops lists every operation, in the order they run.
var Ops = []Op{Push, Pull, PushPull}

// Case is a layout to measure and its repetitions.
type Case struct {
	Kind  Kind
	Bytes int64 // dense and mem: the variable's size in bytes (tiny: 4)
	Keys  int64 // sparse and mem: distinct keys per operation
	Dim   int64 // sparse and mem: row width
	// Warmup and Reps are the untimed and timed repetitions of each
	// operation (DefaultReps where Reps is 0).
	Warmup, Reps int
}

func (c Case) String() string {
	switch c.Kind {
	case Tiny:
		return "tiny"
	case Dense:
		return "dense " + FormatBytes(c.Bytes)
	case Sparse:
		return fmt.Sprintf("sparse %sx%d", FormatKeys(c.Keys), c.Dim)
	}
	return fmt.Sprintf("%s %s+%sx%d", c.Kind, FormatBytes(c.Bytes), FormatKeys(c.Keys), c.Dim)
}

// DefaultReps are the repetitions of a case when none are given: tiny
// 50 warm-up and 500 timed (a call is well under a millisecond); every
// other case 3 and 20.
func DefaultReps(c Case) (warmup, reps int) {
	if c.Kind == Tiny {
		return 50, 500
	}
	return 3, 20
}

// hasDense and hasSparse say which halves of the layout the case uses.
func (c Case) hasDense() bool  { return c.Kind != Sparse }
func (c Case) hasSparse() bool { return c.Kind == Sparse || c.Kind == Mem }

func (c Case) denseFloats() int64 {
	if c.Kind == Tiny {
		return 1
	}
	return c.Bytes / 4
}

// Shape returns the bytes that op must move at the least, out (request)
// and back (reply): see the package doc. A side that carries nothing is
// one byte, as in the baseline (an acknowledgement or a request token);
// payload counts only the real bytes.
func (c Case) Shape(op Op) (request, reply, payload int64) {
	var out int64               // bytes out for a push
	var pullOut, pullBack int64 // bytes out and back for a pull
	if c.hasDense() {
		n := 4 * c.denseFloats()
		out += n
		pullBack += n
	}
	if c.hasSparse() {
		keys, vals := 8*c.Keys, 4*c.Keys*c.Dim
		out += keys + vals
		pullOut += keys
		pullBack += vals
	}
	switch op {
	case Push:
		return out, 1, out
	case Pull:
		return max(pullOut, 1), pullBack, pullOut + pullBack
	}
	// pushpull: the keys travel once.
	return out, pullBack, out + pullBack
}

// Names of the benchmark's variable and table on the ps.
const (
	denseName = "bench_dense"
	tableName = "bench_table"
)

// Session is one case's ps, initialised, and its workers' clients. Open
// returns one; Do runs one operation of one worker; Verify checks the
// final values; Close ends it. A Session may be used by one goroutine per
// worker at a time.
type Session struct {
	Case       Case
	NumWorkers int
	cl         Cluster
	keys       []uint64 // the sparse keys of every operation; read-only
	workers    []*worker
	// Parts is how many pieces the dense variable is cut into.
	Parts int
	// countsOnly: the ps run another rule than sgd at rate 1, so Verify
	// checks the push counts but not the values.
	countsOnly bool
}

// worker is one worker's client and reusable buffers. Only its own
// goroutine touches it.
type worker struct {
	id            int
	c             *client.Client
	reqs          map[Op]*client.Request
	grads, params model.Params
	sgrads, svals []float32
	step          int64
	pushes        int64 // pushes applied (acknowledged, not dropped)
}

// SessionConfig is what Open needs besides the case.
type SessionConfig struct {
	NumPS, NumWorkers int
	// SplitBytes is passed to every client (client.Options): a dense
	// variable larger than it is split across all ps. 0 means 1 when
	// NumPS > 1, so every dense variable of more than one row is split.
	SplitBytes int
	Start      StartFunc
	// Seed chooses the sparse keys.
	Seed uint64
	// GRPCOnly sends pushes and pulls by gRPC instead of the data path
	// (client.Options.GRPCOnly), to compare the two.
	GRPCOnly bool
	Logf     func(format string, args ...any)
	// Dial, if set, makes the workers' connections (client.Options.Dial):
	// the ps's TLS or token, for instance.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// NoKeyCache sends the sparse keys in full every call
	// (client.Options.NoKeyCache), to compare with systems that cache none.
	NoKeyCache bool
	// Optimizer is the update rule the ps apply; the zero value is sgd at
	// rate 1.
	Optimizer optim.Config
}

// startupTimeout bounds the wait for the ps to answer and be initialised.
const startupTimeout = time.Minute

// Open starts the ps of c, creates a client for every worker, and has the
// chief initialise the ps: variables and rows zero, sgd with learning
// rate 1, asynchronous.
func Open(ctx context.Context, cfg SessionConfig, c Case) (s *Session, err error) {
	if cfg.NumPS < 1 || cfg.NumWorkers < 1 {
		return nil, fmt.Errorf("bench: need at least one ps and one worker, got %d and %d", cfg.NumPS, cfg.NumWorkers)
	}
	if c.Reps == 0 {
		c.Warmup, c.Reps = DefaultReps(c)
	}
	if cfg.SplitBytes == 0 && cfg.NumPS > 1 {
		cfg.SplitBytes = 1
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	var vars []model.Variable
	var tables []model.Table
	if c.hasDense() {
		vars = []model.Variable{{Name: denseName, Shape: []int{int(c.denseFloats())}}}
	}
	if c.hasSparse() {
		tables = []model.Table{{Name: tableName, Dim: int(c.Dim)}}
	}
	cl, err := cfg.Start(ctx, cfg.NumPS, cfg.NumWorkers)
	if err != nil {
		return nil, err
	}
	s = &Session{Case: c, NumWorkers: cfg.NumWorkers, cl: cl,
		countsOnly: cfg.Optimizer != (optim.Config{}) && cfg.Optimizer != (optim.Config{Name: "sgd", LearningRate: 1})}
	defer func() {
		if err != nil {
			err = s.explain(err)
			s.abort()
		}
	}()
	if c.hasSparse() {
		s.keys = RandomKeys(int(c.Keys), cfg.Seed)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, startupTimeout,
		fmt.Errorf("bench: the ps at %v were not ready within %s", cl.Addrs(), startupTimeout))
	defer cancel()
	for i := range cfg.NumWorkers {
		wc, err := client.New(cl.Addrs(), vars, client.Options{Worker: i, Tables: tables, SplitBytes: cfg.SplitBytes, Logf: cfg.Logf, GRPCOnly: cfg.GRPCOnly, Dial: cfg.Dial, NoKeyCache: cfg.NoKeyCache})
		if err != nil {
			return nil, err
		}
		s.workers = append(s.workers, s.newWorker(i, wc, vars))
	}
	if c.hasDense() {
		s.Parts = len(s.workers[0].c.Plan().Vars[0].Parts)
	}
	chief := s.workers[0].c
	if _, err := chief.WaitReady(ctx, false); err != nil {
		return nil, err
	}
	if _, err := chief.Init(ctx, model.NewParams(vars), client.InitOptions{
		Optimizer:  cmp.Or(cfg.Optimizer, optim.Config{Name: "sgd", LearningRate: 1}),
		NumWorkers: cfg.NumWorkers,
	}); err != nil {
		return nil, fmt.Errorf("bench: initialising the ps: %w", err)
	}
	for _, w := range s.workers[1:] {
		if _, err := w.c.WaitReady(ctx, true); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// RandomKeys returns n distinct pseudo-random keys, the same for the same
// seed.
func RandomKeys(n int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	seen := make(map[uint64]struct{}, n)
	keys := make([]uint64, 0, n)
	for len(keys) < n {
		k := r.Uint64()
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, k)
	}
	return keys
}

func (s *Session) newWorker(id int, c *client.Client, vars []model.Variable) *worker {
	w := &worker{id: id, c: c, reqs: make(map[Op]*client.Request)}
	var sgrads, spull []client.Rows
	if s.Case.hasDense() {
		w.grads, w.params = model.NewParams(vars), model.NewParams(vars)
		fill(w.grads[denseName], 1)
	}
	if s.Case.hasSparse() {
		n := len(s.keys) * int(s.Case.Dim)
		w.sgrads, w.svals = make([]float32, n), make([]float32, n)
		fill(w.sgrads, 1)
		sgrads = []client.Rows{{Table: tableName, Keys: s.keys, Values: w.sgrads}}
		spull = []client.Rows{{Table: tableName, Keys: s.keys, Values: w.svals}}
	}
	w.reqs[Push] = &client.Request{Push: true, Grads: w.grads, SparseGrads: sgrads}
	w.reqs[Pull] = &client.Request{Pull: true, Params: w.params, SparseParams: spull}
	w.reqs[PushPull] = &client.Request{Push: true, Grads: w.grads, SparseGrads: sgrads, Pull: true, Params: w.params, SparseParams: spull}
	return w
}

func fill(f []float32, v float32) {
	for i := range f {
		f[i] = v
	}
}

// Do runs one operation of worker i and waits for it. A dropped push is
// an error: in asynchronous mode every push must be applied.
func (s *Session) Do(ctx context.Context, i int, op Op) error {
	w := s.workers[i]
	req := w.reqs[op]
	req.Step = w.step
	call := w.c.Do(ctx, req)
	if call.Err != nil {
		return fmt.Errorf("bench: %s: worker %d %s: %w", s.Case, i, op, call.Err)
	}
	w.step = call.Step
	if req.Push {
		if call.Dropped {
			return fmt.Errorf("bench: %s: worker %d %s: the push was dropped, in asynchronous mode", s.Case, i, op)
		}
		w.pushes++
	}
	return nil
}

// Pushes is the number of pushes every worker has had applied so far.
func (s *Session) Pushes() int64 {
	var n int64
	for _, w := range s.workers {
		n += w.pushes
	}
	return n
}

// ErrNotVerified is wrapped by every verification failure.
var ErrNotVerified = errors.New("bench: the ps did not apply exactly the pushes sent")

// CheckLast checks, for a single worker, that the values worker 0 pulled
// last equal minus its pushes (a cheap spot check of the first, middle and
// last element); under another rule than sgd at rate 1 it checks nothing.
func (s *Session) CheckLast() error {
	if s.countsOnly {
		return nil
	}
	w := s.workers[0]
	want := -float32(w.pushes)
	for _, f := range [][]float32{w.params[denseName], w.svals} {
		if len(f) == 0 {
			continue
		}
		for _, i := range []int{0, len(f) / 2, len(f) - 1} {
			if f[i] != want {
				return fmt.Errorf("%w: %s: after %d pushes, a pull read element %d as %v, want %v", ErrNotVerified, s.Case, w.pushes, i, f[i], want)
			}
		}
	}
	return nil
}

// Verify pulls every value the case touched (the dense variable, the rows
// of every key) and checks that each is exactly minus the pushes sent, and
// that each ps counted that many applied pushes and none rejected or
// dropped. Under another rule than sgd at rate 1 (SessionConfig.Optimizer)
// it checks the counts only.
func (s *Session) Verify(ctx context.Context) error {
	return s.verify(ctx, s.Pushes())
}

func (s *Session) verify(ctx context.Context, pushes int64) error {
	if pushes >= 1<<24 {
		return fmt.Errorf("%w: %d pushes is too many to check exactly in float32 (at most 2^24)", ErrNotVerified, pushes)
	}
	want := -float32(pushes)
	c := s.workers[0].c
	var errs []error
	if s.Case.hasDense() && !s.countsOnly {
		params := model.Params{denseName: make([]float32, s.Case.denseFloats())}
		fill(params[denseName], float32(math.NaN()))
		if _, err := c.Pull(ctx, 0, params); err != nil {
			return s.explain(fmt.Errorf("bench: %s: final pull: %w", s.Case, err))
		}
		errs = append(errs, CheckValues(s.Case.String()+" dense variable", params[denseName], want, 1))
	}
	if s.Case.hasSparse() && !s.countsOnly {
		vals := make([]float32, len(s.keys)*int(s.Case.Dim))
		fill(vals, float32(math.NaN()))
		if _, err := c.PullRows(ctx, 0, tableName, s.keys, vals); err != nil {
			return s.explain(fmt.Errorf("bench: %s: final pull of the rows: %w", s.Case, err))
		}
		errs = append(errs, CheckValues(s.Case.String()+" table rows", vals, want, int(s.Case.Dim)))
	}
	sts, err := c.Status(ctx)
	if err != nil {
		return s.explain(fmt.Errorf("bench: %s: status: %w", s.Case, err))
	}
	for i, st := range sts {
		if st.AppliedPushes != pushes || st.RejectedPushes != 0 || st.StaleDropped != 0 {
			errs = append(errs, fmt.Errorf("%w: %s: ps %d counted %d applied, %d rejected and %d dropped pushes; %d were sent",
				ErrNotVerified, s.Case, i, st.AppliedPushes, st.RejectedPushes, st.StaleDropped, pushes))
		}
	}
	return errors.Join(errs...)
}

// CheckValues checks that every element of got is exactly want; rows of
// width dim name the row of a mismatch.
func CheckValues(what string, got []float32, want float32, dim int) error {
	bad, first := 0, -1
	for i, x := range got {
		if x != want {
			if bad == 0 {
				first = i
			}
			bad++
		}
	}
	if bad == 0 {
		return nil
	}
	where := fmt.Sprintf("element %d", first)
	if dim > 1 {
		where = fmt.Sprintf("row %d element %d", first/dim, first%dim)
	}
	return fmt.Errorf("%w: %s: %d of %d values differ from %v; the first: %s is %v",
		ErrNotVerified, what, bad, len(got), want, where, got[first])
}

// Mem reports the memory of each ps that can be measured.
func (s *Session) Mem() []ProcMem {
	var out []ProcMem
	for i := range s.cl.Addrs() {
		if m, ok := s.cl.Mem(i); ok {
			out = append(out, m)
		}
	}
	return out
}

// Dead is closed when a ps stops unexpectedly.
func (s *Session) Dead() <-chan struct{} { return s.cl.Dead() }

// Close tells every ps that every worker is done, closes the clients and
// waits for the ps to exit.
func (s *Session) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	for _, w := range s.workers {
		if err := w.c.Done(ctx); err != nil {
			errs = append(errs, fmt.Errorf("bench: worker %d Done: %w", w.id, err))
		}
		w.c.Close()
	}
	errs = append(errs, s.cl.Close(len(errs) == 0))
	return s.explain(errors.Join(errs...))
}

// abort closes the clients and stops the ps at once, after a failure.
func (s *Session) abort() {
	for _, w := range s.workers {
		w.c.Close()
	}
	s.cl.Close(false)
}

// explain adds, to an error that a ps dying explains, why it died.
func (s *Session) explain(err error) error {
	if err == nil {
		return nil
	}
	select {
	case <-s.cl.Dead():
		if r, ok := s.cl.(interface{ exitReport() error }); ok {
			return errors.Join(err, r.exitReport())
		}
	default:
	}
	return err
}
