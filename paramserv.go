// Package paramserv trains your own model on a paramserv cluster: your
// program is a worker, the parameter servers (ps) hold the model's
// variables and sparse tables, sharded across them, and apply the
// optimizer to the gradients the workers push.
//
// # Running a program as a worker
//
// The ps are processes of the paramserv binary; your program runs once per
// worker and learns the cluster and its own task from TF_CONFIG, as
// TensorFlow's parameter-server training and Kubernetes' TFJob operator
// set it. On one machine, paramserv local does both:
//
//	paramserv local --ps=2 --workers=2 -- go run ./mymodel --train_steps=2000
//
// # A worker's life
//
// Start connects to every ps. Worker 0, the chief, initialises the ps with
// the initial values it is given (or finds them initialised already, after
// a restart or a checkpoint restore); the other workers wait until it has.
// Then each step pulls the current values, computes gradients and pushes
// them while pulling the next values (PushPull), until the global step (the
// count of updates the ps applied) reaches the goal; Done tells the ps this
// worker has finished, and they exit once every worker has.
//
//	w, err := paramserv.Start(ctx, paramserv.Config{
//		Variables: []paramserv.Variable{{Name: "w", Shape: []int{784, 10}}, {Name: "b", Shape: []int{10}}},
//		Optimizer: paramserv.Optimizer{Name: "adam", LearningRate: 0.001},
//	}, init) // init: the chief's initial values; nil on the other workers
//	params, grads := w.NewParams(), w.NewParams()
//	w.Pull(ctx, params)
//	for w.Step() < 2000 {
//		computeGradients(params, grads) // your model
//		w.PushPull(ctx, grads, params)
//	}
//	w.Done(ctx)
//
// Push pushes without reading values back, for a program that pulls only
// when it needs the values.
//
// PullAsync, PushAsync, PushPullAsync, PushPullRowsAsync and PullRowsAsync
// start the same calls without waiting and return a *Call to Wait on, so
// that the program computes while the values travel (see
// ExampleWorker_PushPullAsync).
//
// Training is asynchronous by default: every push is applied as it comes.
// With Sync, the gradients of ReplicasToAggregate workers computed at the
// same step are averaged into one update (TensorFlow's
// SyncReplicasOptimizer), and PushPull waits for the step to complete.
//
// # Sparse tables
//
// A table holds rows of Dim floats keyed by uint64 ids, created on first
// touch, sharded across the ps by a hash of the key: embeddings, or the
// weights of a sparse logistic regression. PullRows reads the rows of the
// batch's keys; PushPullRows pushes their gradients with the dense ones
// (PushRows pushes one table's alone).
// Under Run, a Model that implements SparseModel declares its tables and
// the loop moves the rows of each batch's keys. One that also implements
// SparseReadAhead (it holds two batches, and computes the one before its
// last) has each round trip overlapped with its compute: with one
// asynchronous worker, the rows of batch t+1 travel while batch t is
// computed. NextBatch returns ErrEndOfData once the data has ended.
//
// # When a ps dies
//
// With CheckpointDir (the directory every ps was given as
// --checkpoint_dir), the chief saves a checkpoint every SaveSteps global
// steps and at Done. When a ps dies and restarts, it restores the newest
// checkpoint; every worker's next call waits for it (up to
// RecoveryTimeout), the chief rolls the other ps back to the same step,
// and the call returns the values and step of the restored model, the
// gradients of the failed step lost. A Worker's methods return an error
// only for a call that cannot be made (a slice of the wrong length, an
// unknown table, a gradient holding a NaN or an Inf, which is refused
// whole: nothing applied, the step unchanged; a call after Close; a ctx
// that ended, errors.Is(err, context.Canceled) or DeadlineExceeded) and
// when training cannot go on: a ps that does not come back, or a model
// whose variables differ from those the ps hold (ErrLayout).
//
// # Metrics
//
// With MetricsAddr, or the environment variable PARAMSERV_METRICS_ADDR
// that paramserv local -- CMD sets for each worker, the worker serves
// Prometheus metrics at http://HOST:PORT/metrics and a status page with
// its loss curve at /, as the built-in workers do: every call counted
// (paramserv_worker_calls_total by call), timed as the program waits for it
// (paramserv_worker_call_seconds) and its bytes
// (paramserv_worker_push_bytes_total, paramserv_worker_pull_bytes_total);
// each PushPull a step (paramserv_worker_steps_total,
// paramserv_worker_global_step, push_pull_seconds, and compute_seconds, the
// program's own time since its previous call returned). ReportLoss gives the
// batch's loss (paramserv_worker_loss, examples_total), which paramserv
// local's progress line and the status page show (see
// ExampleWorker_ReportLoss):
//
//	for w.Step() < 2000 {
//		loss := computeGradients(params, grads)
//		w.ReportLoss(loss, batchSize)
//		w.PushPull(ctx, grads, params)
//	}
//
// A Worker is used by one goroutine at a time (ReportLoss may run beside
// an …Async call in flight).
package paramserv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/replication"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/session"
	"github.com/paramserv/paramserv/internal/telemetry"
	"github.com/paramserv/paramserv/internal/trainer"
)

// Variable is a dense variable of the model: a name and a shape (row-major
// float32 values).
type Variable struct {
	Name  string
	Shape []int
	// Optimizer, if set, is the update rule the ps apply to this variable
	// instead of Config.Optimizer (the job's): e.g. Adam for the dense
	// layers of a model whose embedding tables train with FTRL. The ps keep
	// the variable's state slots for its own rule, and checkpoints record it.
	Optimizer *Optimizer
}

// Size is the number of values.
func (v Variable) Size() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// Table is a sparse table of rows of Dim floats keyed by uint64 ids.
type Table struct {
	Name string
	Dim  int
	// Init is "zeros" (the default) or "normal": a truncated normal of
	// InitStddev, a pure function of Seed and the key.
	Init       string
	InitStddev float64
	Seed       uint64
	// MinCount admits a key only once it has been seen this many times;
	// EvictAfterSteps drops rows not touched for that many global steps
	// (0: never).
	MinCount, EvictAfterSteps int64
	// Optimizer, if set, is the update rule the ps apply to this table's
	// rows instead of Config.Optimizer (the job's).
	Optimizer *Optimizer
}

// Optimizer is the update rule the ps apply: Name is one of "sgd",
// "momentum", "adagrad", "adagrad_da", "adadelta", "adam", "adamw",
// "rmsprop", "ftrl", "proximal_sgd", "proximal_adagrad" or "lamb"; a zero
// hyper-parameter means the rule's default (TensorFlow's, or PyTorch's
// where TensorFlow 1 has no such rule). docs/OPTIMIZERS.md gives each
// rule's formula.
type Optimizer struct {
	Name         string
	LearningRate float64
	// Schedule is the learning-rate schedule over the global step, e.g.
	// "warmup(steps=500)+exponential(decay_steps=1000,decay_rate=0.96)";
	// "": constant. See docs/OPTIMIZERS.md.
	Schedule     string
	Momentum     float64 // momentum (0.9), rmsprop (0)
	Nesterov     bool
	Beta1, Beta2 float64 // adam, adamw, lamb (0.9, 0.999)
	// Epsilon: adam, adamw, adadelta (1e-8), rmsprop (1e-10), lamb (1e-6),
	// adagrad (0).
	Epsilon float64
	// InitialAccumulator: adagrad, ftrl, adagrad_da, proximal_adagrad
	// (0.1), rmsprop (1).
	InitialAccumulator float64
	// FTRL-Proximal: beta (1), L1 and L2 (0, also adagrad_da's and the
	// proximal rules'), L2Shrinkage (0).
	FTRLBeta, L1, L2, L2Shrinkage float64
	// LearningRatePower: ftrl's learning_rate_power, <= 0 (nil: -0.5; 0:
	// a fixed rate per coordinate), as TF's FtrlOptimizer.
	LearningRatePower *float64
	// Rho: adadelta (0.95), rmsprop's decay (0.9). Centered: rmsprop.
	Rho      float64
	Centered bool
	// WeightDecay: adamw (0.01), lamb (0).
	WeightDecay float64
}

// Params holds a value slice per variable name.
type Params map[string][]float32

// Config is a worker's view of the job. Every worker must declare the
// same variables and tables; the chief's optimizer and mode are the
// cluster's.
type Config struct {
	// TFConfig is the cluster and this task in TF_CONFIG's JSON form; ""
	// reads the environment variable TF_CONFIG.
	TFConfig string

	Variables []Variable
	Tables    []Table
	Optimizer Optimizer

	Sync                bool
	ReplicasToAggregate int   // sync: gradients averaged per step (0: every worker)
	MaxStaleness        int64 // async: drop gradients older than this many steps (0: never)

	// CheckpointDir, if set, is the directory every ps was given as
	// --checkpoint_dir: the chief saves there every SaveSteps global
	// steps (or every 10 minutes if 0) and at Done. Empty reads the
	// environment variable PARAMSERV_CHECKPOINT_DIR (and a SaveSteps of
	// 0 PARAMSERV_SAVE_STEPS), which `paramserv local -- CMD` sets from
	// its --checkpoint_dir (--save_steps).
	CheckpointDir string
	SaveSteps     int64

	// SummaryDir, if set, is where the chief writes TensorBoard event
	// files: every SaveSummariesSteps global steps (100 if 0) the loss
	// last given to ReportLoss (none if none was), global steps and
	// reported examples per second, and the scheduled learning rate.
	// Empty reads PARAMSERV_SUMMARY_DIR (and a SaveSummariesSteps of 0
	// PARAMSERV_SAVE_SUMMARIES_STEPS), which `paramserv local -- CMD` sets
	// from its --summary_dir, or else its --checkpoint_dir.
	SummaryDir         string
	SaveSummariesSteps int64

	// StartupTimeout bounds Start's wait for the ps; RecoveryTimeout the
	// wait for a ps that died to come back (5 minutes each if 0).
	StartupTimeout, RecoveryTimeout time.Duration

	// Logf receives the worker's log lines: what it waits for, recovery,
	// checkpoints (nil discards them).
	Logf func(format string, args ...any)

	// Auth authenticates the connections to the ps, as the ps's own
	// flags do.
	Auth Auth

	// MetricsAddr, if set (HOST:PORT; port 0: a free one), serves the
	// worker's Prometheus metrics at http://MetricsAddr/metrics and a
	// status page at / from Start to Close, logged once through Logf as
	// "metrics: URL" (see Metrics in the package doc). Empty reads the
	// environment variable PARAMSERV_METRICS_ADDR, which `paramserv local
	// -- CMD` sets for each worker; "off" serves none whatever it says.
	MetricsAddr string
}

// envInt is the integer in the environment variable name, 0 if it is
// unset or not an integer.
func envInt(name string) int64 {
	n, _ := strconv.ParseInt(os.Getenv(name), 10, 64)
	return n
}

// metricsAddr is the address to serve the metrics at, "" for none.
func (c Config) metricsAddr() string {
	a := c.MetricsAddr
	if a == "" {
		a = os.Getenv("PARAMSERV_METRICS_ADDR")
	}
	if a == "off" {
		return ""
	}
	return a
}

// Auth names the files that authenticate a task's connections: mutual TLS
// with a directory made by `paramserv certs` (TLSDir) or with explicit
// files, and/or a shared token, as the flags --tls_dir, --tls_cert,
// --tls_key, --tls_ca and --auth_token_file (docs/DEPLOY.md). When every
// field is empty they are read from PARAMSERV_TLS_DIR, PARAMSERV_TLS_CERT,
// PARAMSERV_TLS_KEY, PARAMSERV_TLS_CA and PARAMSERV_AUTH_TOKEN_FILE, which
// `paramserv local -- CMD` sets from its flags.
type Auth struct {
	TLSDir, TLSCert, TLSKey, TLSCA string
	TokenFile                      string
}

// policy loads a's files for task cl.
func (a Auth) policy(cl cluster.Config) (*secure.Policy, error) {
	f := secure.Files{Dir: a.TLSDir, Cert: a.TLSCert, Key: a.TLSKey, CA: a.TLSCA, TokenFile: a.TokenFile}
	if !f.Any() {
		f = secure.FilesFromEnv(os.Getenv)
	}
	host := ""
	if cl.Task.Job == cluster.JobPS {
		host, _, _ = net.SplitHostPort(cl.Addr())
	}
	p, err := secure.Load(f, string(cl.Task.Job), cl.Task.Index, host)
	if err != nil {
		return nil, fmt.Errorf("paramserv: %w", err)
	}
	return p, nil
}

// ErrLayout is returned (wrapped) when the ps hold other variables or
// tables than the worker's model: another model, or a checkpoint of
// another model. Waiting does not help; the input must be fixed.
var ErrLayout = client.ErrLayout

// Worker is a started worker of the job.
type Worker struct {
	s      *session.Session
	vars   []Variable
	last   *Call // the …Async call started last
	done   bool  // Done succeeded
	closed bool  // Close was called
}

// Start connects to the cluster's ps and waits for them, the chief
// initialising them with init (one slice per variable, of its Size) and
// the other workers passing nil. It gives up after StartupTimeout or when
// ctx ends.
func Start(ctx context.Context, cfg Config, init Params) (*Worker, error) {
	cl, err := clusterOf(cfg.TFConfig)
	if err != nil {
		return nil, err
	}
	if cl.Task.Job != cluster.JobWorker {
		return nil, fmt.Errorf("paramserv: TF_CONFIG names task %s: a program is a worker (the ps are paramserv processes)", cl.Task)
	}
	sc := session.Config{
		Config: lifecycle.Config{
			Cluster:             cl,
			Optimizer:           cfg.Optimizer.config(),
			Sync:                cfg.Sync,
			ReplicasToAggregate: cfg.ReplicasToAggregate,
			MaxStaleness:        cfg.MaxStaleness,
			CheckpointDir:       cmp.Or(cfg.CheckpointDir, os.Getenv("PARAMSERV_CHECKPOINT_DIR")),
			SaveSteps:           cmp.Or(cfg.SaveSteps, envInt("PARAMSERV_SAVE_STEPS")),
			StartupTimeout:      cfg.StartupTimeout,
			RecoveryTimeout:     cfg.RecoveryTimeout,
			Logf:                cfg.Logf,
		},
		MetricsAddr:        cfg.metricsAddr(),
		SummaryDir:         cmp.Or(cfg.SummaryDir, os.Getenv("PARAMSERV_SUMMARY_DIR")),
		SaveSummariesSteps: cmp.Or(cfg.SaveSummariesSteps, envInt("PARAMSERV_SAVE_SUMMARIES_STEPS")),
	}
	auth, err := cfg.Auth.policy(cl)
	if err != nil {
		return nil, err
	}
	sc.Dial = auth.Dialer(nil)
	sc.MetricsAddr = telemetry.ListenAddr(sc.MetricsAddr, auth.Any(), cfg.Logf)
	for _, v := range cfg.Variables {
		for _, d := range v.Shape {
			if d < 1 {
				return nil, fmt.Errorf("paramserv: variable %q: shape %v: want every dimension >= 1", v.Name, v.Shape)
			}
		}
	}
	sc.Variables = modelVariables(cfg.Variables)
	sc.Tables = modelTables(cfg.Tables)
	if err := checkOwnRules(sc.Variables, sc.Tables); err != nil {
		return nil, err
	}
	var mi model.Params
	if init != nil {
		mi = model.Params(init)
	}
	s, err := session.Start(ctx, sc, mi)
	if err != nil {
		return nil, fmt.Errorf("paramserv: %w", err)
	}
	return &Worker{s: s, vars: cfg.Variables}, nil
}

// Index is this worker's index; 0 is the chief.
func (w *Worker) Index() int { return w.s.Worker() }

// IsChief reports whether this worker is the chief (worker 0), which
// initialises the ps and saves checkpoints.
func (w *Worker) IsChief() bool { return w.s.Worker() == 0 }

// NumWorkers is the number of workers in the cluster.
func (w *Worker) NumWorkers() int { return w.s.NumWorkers() }

// Sync reports whether the cluster trains synchronously, as the ps say (a
// cluster restored from a checkpoint keeps the mode it was saved in).
func (w *Worker) Sync() bool { return w.s.Sync() }

// Step is the global step of the values last pulled.
// It waits for the calls in flight.
func (w *Worker) Step() int64 {
	w.waitInFlight()
	return w.s.Step()
}

// NewParams returns zeroed value slices for the worker's variables, to
// pull into or to hold gradients.
func (w *Worker) NewParams() Params {
	p := make(Params, len(w.vars))
	for _, v := range w.vars {
		p[v.Name] = make([]float32, v.Size())
	}
	return p
}

// Pull reads every variable's current values into params and returns
// their global step.
func (w *Worker) Pull(ctx context.Context, params Params) (int64, error) {
	w.waitInFlight()
	if err := w.closedErr("Pull"); err != nil {
		return w.s.Step(), err
	}
	step, err := w.s.Pull(ctx, model.Params(params))
	return step, ctxErr(ctx, err)
}

// PushPull pushes grads, computed from the values last pulled, and reads
// the next values into params: at once in asynchronous training, once the
// step completes in synchronous training. It returns the new global step.
func (w *Worker) PushPull(ctx context.Context, grads, params Params) (int64, error) {
	w.waitInFlight()
	if err := w.closedErr("PushPull"); err != nil {
		return w.s.Step(), err
	}
	step, err := w.s.PushPull(ctx, model.Params(grads), model.Params(params))
	return step, ctxErr(ctx, err)
}

// Rows are gradients of rows of a sparse table: Values holds len(Keys)×Dim
// floats, row i for Keys[i]; the keys are distinct.
type Rows struct {
	Table  string
	Keys   []uint64
	Values []float32
}

// PushPullRows is PushPull that also pushes gradients of sparse rows, in
// the same request, so that they count as one push of this worker's step.
// Each table appears once in rows, the gradients of a key summed.
func (w *Worker) PushPullRows(ctx context.Context, grads, params Params, rows []Rows) (int64, error) {
	w.waitInFlight()
	if err := w.closedErr("PushPullRows"); err != nil {
		return w.s.Step(), err
	}
	step, err := w.s.PushPullRows(ctx, model.Params(grads), model.Params(params), sessionRows(rows))
	return step, ctxErr(ctx, err)
}

// Push pushes grads, computed from the values last pulled, as this
// worker's step, and reads no values back: PushPull without its pull, for
// a program that pulls when it needs the values (Pull) or not at all. It
// returns the new global step: at once in asynchronous training, once the
// step completes in synchronous training (the next Pull reads its values).
func (w *Worker) Push(ctx context.Context, grads Params) (int64, error) {
	w.waitInFlight()
	if err := w.closedErr("Push"); err != nil {
		return w.s.Step(), err
	}
	step, err := w.s.Push(ctx, model.Params(grads), nil)
	return step, ctxErr(ctx, err)
}

// PushRows pushes gradients of rows of one table (grads: len(keys)×Dim
// values, row i for keys[i]; keys distinct), computed from the values last
// pulled, as a push of its own: in synchronous training it takes this
// worker's place in the step, so a model with dense variables too pushes
// its rows with PushPullRows instead. After a ps failure the worker
// recovers and the gradients are lost.
func (w *Worker) PushRows(ctx context.Context, table string, keys []uint64, grads []float32) error {
	w.waitInFlight()
	if err := w.closedErr("PushRows"); err != nil {
		return err
	}
	return ctxErr(ctx, w.s.PushRows(ctx, table, keys, grads))
}

// PullRows reads the rows of keys (distinct) of a table into out
// (len(keys)×Dim values, row i for keys[i]); keys not seen before read as
// the table's initial value.
func (w *Worker) PullRows(ctx context.Context, table string, keys []uint64, out []float32) error {
	w.waitInFlight()
	if err := w.closedErr("PullRows"); err != nil {
		return err
	}
	return ctxErr(ctx, w.s.PullRows(ctx, table, keys, out))
}

// ChangeRate changes the job's learning rate and schedule on every ps from
// global step from on: the updates applied at that step and after use
// learningRate under schedule (ParseSchedule's syntax; "" is constant),
// evaluated on the global step. Variables and tables with their own
// Optimizer keep theirs. Only the chief may call it; name a step ahead of
// the ps's (Step() plus a few) so that every ps switches at the same one.
// The ps log the change and keep it in their checkpoints.
func (w *Worker) ChangeRate(ctx context.Context, from int64, learningRate float64, schedule string) error {
	w.waitInFlight()
	if err := w.closedErr("ChangeRate"); err != nil {
		return err
	}
	return ctxErr(ctx, w.s.ChangeRate(ctx, optim.RateChange{From: from, LearningRate: learningRate, Schedule: schedule}))
}

// Done ends this worker's training: the chief saves the final checkpoint,
// then every ps is told this worker has finished. Once it has succeeded, a
// second Done does nothing and returns nil.
func (w *Worker) Done(ctx context.Context) error {
	w.waitInFlight()
	if err := w.closedErr("Done"); err != nil {
		return err
	}
	if w.done {
		return nil
	}
	if err := w.s.Done(ctx); err != nil {
		return ctxErr(ctx, err)
	}
	w.done = true
	return nil
}

// Close closes the connections to the ps and the metrics endpoint, after
// the calls in flight. A second Close does nothing and returns nil; the
// calls made after Close fail at once, saying so.
func (w *Worker) Close() error {
	w.waitInFlight()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.s.Close()
}

// closedErr is the error of call made after Close, nil before.
func (w *Worker) closedErr(call string) error {
	if w.closed {
		return fmt.Errorf("paramserv: worker %d: %s after Close: its connections to the ps are closed", w.s.Worker(), call)
	}
	return nil
}

// ctxErr is err, wrapping ctx's error when ctx ended, so that
// errors.Is(err, context.Canceled) (or DeadlineExceeded) says why a call
// gave up.
func ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("paramserv: %w: %w", cerr, err)
	}
	return err
}

// ReportLoss tells the worker's metrics the training loss of the batch the
// program computed last, at the global step of the values it pulled last,
// and the batch's examples (0: not counted): paramserv_worker_loss,
// paramserv_worker_examples_total, the status page's loss curve, and the
// progress line of paramserv local. Without metrics it does nothing. It
// may be called while an …Async call is in flight.
func (w *Worker) ReportLoss(loss float64, examples int) { w.s.ReportLoss(loss, examples) }

// MetricsAddr is the address the worker's metrics are served at
// (HOST:PORT, with the port chosen when the one asked for was 0), or ""
// when it serves none.
func (w *Worker) MetricsAddr() string { return w.s.MetricsAddr() }

// PSConfig is one ps task: the cluster and its index in TF_CONFIG's form
// ("" reads TF_CONFIG), and the checkpoint directory it restores from and
// the chief saves to.
type PSConfig struct {
	TFConfig      string
	CheckpointDir string
	Logf          func(format string, args ...any)
	// Listen, if set, makes the ps's listener instead of TCP on its
	// address (tests: an in-memory or pre-bound listener).
	Listen func(addr string) (net.Listener, error)
	// Auth authenticates every connection to the ps (see Auth).
	Auth Auth
	// MaxTableKeys, if positive, caps the keys (rows) each sparse table
	// holds on this ps: a push that would add rows past it fails with an
	// error naming the table and the cap, and a pull of a key past it
	// reads the key's initial value (paramserv train --max_table_keys).
	// Not with TableMemory.
	MaxTableKeys int
	// TableMemory, if > 0, is the memory in bytes the rows of the ps's
	// sparse tables may take; the others live on disk in TableDir
	// (default: beside CheckpointDir, else a temporary directory), the
	// coldest moved out, a row read from disk moved back in, with the
	// same results as all in memory (docs/TIERS.md). 0: every row in
	// memory. EvictUnseen, with TableMemory, drops rows not pushed for
	// that long.
	TableMemory int64
	TableDir    string
	EvictUnseen time.Duration
}

// ServePS runs a ps task until every worker has said Done (nil) or ctx
// ends. Jobs usually run the ps as paramserv processes (paramserv train
// --job_name=ps, or paramserv local); ServePS embeds one in a program.
func ServePS(ctx context.Context, cfg PSConfig) error {
	cl, err := clusterOf(cfg.TFConfig)
	if err != nil {
		return err
	}
	if cl.Task.Job != cluster.JobPS {
		return fmt.Errorf("paramserv: TF_CONFIG names task %s, want a ps task", cl.Task)
	}
	auth, err := cfg.Auth.policy(cl)
	if err != nil {
		return err
	}
	listen := cfg.Listen
	if auth != nil {
		listen = func(addr string) (net.Listener, error) {
			var lis net.Listener
			var err error
			if cfg.Listen != nil {
				lis, err = cfg.Listen(addr)
			} else {
				lis, err = net.Listen("tcp", addr)
			}
			if err != nil {
				return nil, err
			}
			return auth.Listener(lis, cfg.Logf), nil
		}
	}
	if cfg.TableMemory < 0 || cfg.EvictUnseen < 0 || (cfg.TableMemory == 0 && (cfg.TableDir != "" || cfg.EvictUnseen != 0)) {
		return fmt.Errorf("paramserv: TableMemory %d, TableDir %q, EvictUnseen %s: want TableMemory > 0 for a disk tier (then TableDir and EvictUnseen >= 0), or all three zero", cfg.TableMemory, cfg.TableDir, cfg.EvictUnseen)
	}
	if cfg.MaxTableKeys < 0 || (cfg.MaxTableKeys > 0 && cfg.TableMemory > 0) {
		return fmt.Errorf("paramserv: MaxTableKeys %d with TableMemory %d: want MaxTableKeys >= 0 (0: no cap), and not both (the cap counts rows in memory, the disk tier keeps rows past its budget on disk)", cfg.MaxTableKeys, cfg.TableMemory)
	}
	return trainer.RunPS(ctx, trainer.PSConfig{
		PSConfig: replication.PSConfig{Cluster: cl, CheckpointDir: cfg.CheckpointDir, Logf: cfg.Logf, Listen: listen, MaxTableKeys: cfg.MaxTableKeys},
		Tiered:   cfg.TableMemory > 0, TableMemory: cfg.TableMemory, TableDir: cfg.TableDir, EvictUnseen: cfg.EvictUnseen,
	})
}

// clusterOf reads the cluster and this task from tf, TF_CONFIG's JSON
// form, or from the environment variable TF_CONFIG when tf is "".
func clusterOf(tf string) (cluster.Config, error) {
	if tf == "" {
		tf = os.Getenv("TF_CONFIG")
	}
	if tf == "" {
		return cluster.Config{}, errors.New("paramserv: no cluster: set TF_CONFIG (paramserv local -- CMD does) or the config's TFConfig")
	}
	cl, err := cluster.Resolve(cluster.Flags{}, tf)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("paramserv: TF_CONFIG: %w", err)
	}
	return cl, nil
}

// config is the optimizer as the ps take it.
func (o Optimizer) config() optim.Config {
	return optim.Config{
		Name: o.Name, LearningRate: o.LearningRate, Momentum: o.Momentum, Nesterov: o.Nesterov,
		InitialAccumulator: o.InitialAccumulator, Beta1: o.Beta1, Beta2: o.Beta2, Epsilon: o.Epsilon,
		FTRLBeta: o.FTRLBeta, L1: o.L1, L2: o.L2, L2Shrinkage: o.L2Shrinkage,
		Rho: o.Rho, Centered: o.Centered, WeightDecay: o.WeightDecay, Schedule: o.Schedule,
		LearningRatePower: o.LearningRatePower,
	}
}

// own is a variable's or table's own rule as the ps take it; nil: the job's.
func (o *Optimizer) own() *optim.Config {
	if o == nil {
		return nil
	}
	c := o.config()
	return &c
}

// checkOwnRules refuses a variable's or table's own rule that the ps would
// refuse, before any connection.
func checkOwnRules(vs []model.Variable, ts []model.Table) error {
	for _, v := range vs {
		if v.Optimizer != nil {
			if _, err := optim.New(*v.Optimizer); err != nil {
				return fmt.Errorf("paramserv: variable %q: its Optimizer: %w", v.Name, err)
			}
		}
	}
	for _, t := range ts {
		if t.Optimizer != nil {
			if _, err := optim.New(*t.Optimizer); err != nil {
				return fmt.Errorf("paramserv: table %q: its Optimizer: %w", t.Name, err)
			}
		}
	}
	return nil
}

func modelVariables(vs []Variable) []model.Variable {
	out := make([]model.Variable, len(vs))
	for i, v := range vs {
		out[i] = model.Variable{Name: v.Name, Shape: v.Shape, Optimizer: v.Optimizer.own()}
	}
	return out
}

func modelTables(ts []Table) []model.Table {
	var out []model.Table
	for _, t := range ts {
		out = append(out, model.Table{Name: t.Name, Dim: t.Dim, Init: t.Init, InitStddev: t.InitStddev,
			Seed: t.Seed, MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps, Optimizer: t.Optimizer.own()})
	}
	return out
}

func mparams(p Params) model.Params { return model.Params(p) }

func sessionRows(rows []Rows) []session.Rows {
	rs := make([]session.Rows, len(rows))
	for i, r := range rows {
		rs[i] = session.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values}
	}
	return rs
}
