// Package session is one worker's connection to a training job's parameter
// servers, for programs that train their own model: Start waits for the ps
// and has the chief initialise them (the others wait until it has), then
// the program pulls values, pushes gradients and pulls the next values
// (PushPull), reads and updates rows of sparse tables, and says Done.
//
// It is the layer the Python binding (python/native) calls, so that
// placement, key hashing, the chief's Init, incarnations and recovery are
// this Go code's and are not written again in another language.
//
// Start-up, recovery and checkpoints are the built-in training loop's
// (package lifecycle): the chief locks its checkpoint directory, initialises
// the ps or finds them initialised or restored, and the others wait until
// the ps hold one history; when an exchange fails because a ps went away
// or restarted, the session waits for it (the chief rolling the cluster
// back to one checkpoint), pulls the current values and goes on from the
// cluster's step, the failed step's gradients lost; the chief saves a
// checkpoint every SaveSteps and at Done.
//
// A Session is used by one goroutine at a time.
package session

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/telemetry"
	"github.com/paramserv/paramserv/internal/wire"
)

// Config is one worker's view of the job.
type Config struct {
	// Config is the worker's life around the program's loop: Cluster, the
	// cluster and this worker's task (read it with cluster.Resolve from
	// flags or TF_CONFIG; Task.Job must be "worker"); the chief's choices
	// for the whole cluster (the others' are ignored: the ps tell them the
	// mode); SplitBytes (see client.Options; every worker must use the
	// same); the chief's checkpoints in CheckpointDir, every SaveSteps
	// global steps and/or SaveEvery (10 minutes if neither is set), and
	// at Done, keeping the last KeepCheckpoints (every ps must have been
	// started with the same --checkpoint_dir, which it restores from after
	// a restart); StartupTimeout, bounding Start's wait for the ps, and
	// RecoveryTimeout, the wait for them to come back after a failure (5
	// minutes each if 0); the log (Logf, WaitLogEvery). Its Observer is
	// the session's metrics (MetricsAddr), not set here.
	lifecycle.Config

	// Variables are the dense variables, in order; Tables the sparse ones.
	// Every worker must declare the same.
	Variables []model.Variable
	Tables    []model.Table

	// Dial, if set, replaces TCP for the connections to the ps (tests run
	// clusters over package memnet).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	// ThreadReads is client.Options.ThreadReads: for a program whose calls
	// come from threads of its own through cgo (the Python library), the
	// answers are waited for on the calling thread.
	ThreadReads bool

	// MetricsAddr, if set (HOST:PORT; port 0: a free one), serves the
	// worker's Prometheus metrics at http://MetricsAddr/metrics and its
	// status page at /, from Start to Close, and logs "metrics: URL" once:
	// every call counted and timed with its bytes, the steps, and the
	// losses the program reports (ReportLoss); the chief's checkpoints.
	MetricsAddr string

	// SummaryDir, if set, is where the chief writes TensorBoard event
	// files (events.out.tfevents.*) from Start to Close: every
	// SaveSummariesSteps global steps (100 if 0) the latest loss the
	// program reported (ReportLoss; none if it reported none), global
	// steps and examples (those reported) per second, the pushes
	// dropped, and the job's scheduled learning rate.
	SummaryDir         string
	SaveSummariesSteps int64
}

// Session is a started worker.
type Session struct {
	cfg    Config
	c      *client.Client
	w      *lifecycle.Worker
	step   int64
	worker int

	// With Config.MetricsAddr: the endpoint and the metrics; local counts
	// the steps, returned when the last call returned (the program's own
	// time is from then to its next push).
	srv      *telemetry.Server
	calls    *telemetry.Calls
	local    int64
	returned time.Time

	collectives int64      // the collective calls made (collective.go): the next one's number
	deferSaves  bool       // the program saves the due checkpoints with its state (DeferSaves)
	sum         *summaries // the chief's, with Config.SummaryDir
}

func (cfg *Config) defaults() {
	cfg.Config.Defaults()
	if cfg.CheckpointDir != "" && cfg.SaveSteps <= 0 && cfg.SaveEvery <= 0 {
		cfg.SaveEvery = 10 * time.Minute // as --save_model_secs
	}
}

// Start connects to every ps and waits for them. The chief (worker 0) Inits
// them with init, or finds them initialised already (after a chief restart
// or a checkpoint restore) and goes on from their step; the other workers
// pass nil and wait until the chief has initialised the ps. It gives up
// after cfg.StartupTimeout or when ctx ends.
func Start(ctx context.Context, cfg Config, init model.Params) (*Session, error) {
	cfg.defaults()
	if cfg.Cluster.Task.Job != cluster.JobWorker {
		return nil, fmt.Errorf("session: task %s: want a worker task", cfg.Cluster.Task)
	}
	numWorkers := len(cfg.Cluster.Spec.Workers)
	if cfg.Sync && cfg.ReplicasToAggregate > numWorkers {
		return nil, fmt.Errorf("session: replicas_to_aggregate=%d is more than the %d workers", cfg.ReplicasToAggregate, numWorkers)
	}
	worker := cfg.Cluster.Task.Index
	chief := cfg.Cluster.IsChief()
	if chief {
		for _, v := range cfg.Variables {
			if got := len(init[v.Name]); got != v.Size() {
				return nil, fmt.Errorf("session: chief: initial value of %q has %d elements, want %d (shape %v)", v.Name, got, v.Size(), v.Shape)
			}
		}
	}
	var srv *telemetry.Server
	var calls *telemetry.Calls
	var observer lifecycle.Observer
	if cfg.MetricsAddr != "" {
		reg := telemetry.NewRegistry()
		mw := telemetry.NewWorker(reg)
		calls = telemetry.NewCalls(reg, mw)
		var err error
		if srv, err = telemetry.Serve(cfg.MetricsAddr, reg, mw.Page(), cfg.Logf); err != nil {
			return nil, fmt.Errorf("session: worker %d: %w", worker, err)
		}
		observer = mw
	}
	sum, err := newSummaries(cfg)
	if err != nil {
		if srv != nil {
			_ = srv.Close()
		}
		return nil, err
	}
	s, err := start(ctx, cfg, init, observer)
	if err != nil {
		if srv != nil {
			_ = srv.Close()
		}
		if sum != nil {
			_ = sum.close()
		}
		return nil, err
	}
	s.srv, s.calls, s.returned, s.sum = srv, calls, time.Now(), sum
	if calls != nil {
		calls.At(s.step)
	}
	return s, nil
}

func start(ctx context.Context, cfg Config, init model.Params, observer lifecycle.Observer) (*Session, error) {
	worker := cfg.Cluster.Task.Index
	chief := cfg.Cluster.IsChief()
	c, err := client.New(cfg.Cluster.Spec.PS, cfg.Variables, client.Options{
		Worker: worker, Tables: cfg.Tables, SplitBytes: cfg.SplitBytes, Logf: cfg.Logf, WaitLogEvery: cfg.WaitLogEvery, Dial: cfg.Dial,
		ThreadReads: cfg.ThreadReads,
	})
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	lcfg := cfg.Config
	lcfg.Observer = observer
	w, step, err := startWorker(ctx, lcfg, c, cfg.Variables, init)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("session: %w", err)
	}
	s := &Session{cfg: cfg, c: c, w: w, step: step, worker: worker}
	if c.IsSync() != cfg.Sync && chief {
		cfg.Logf("worker %d: warning: the ps train %s (restored from a checkpoint); going on so", worker, modeName(c.IsSync()))
	}
	return s, nil
}

// startWorker is the worker's start-up (lifecycle.Worker.Start): it
// returns the worker and the global step the cluster is at.
func startWorker(ctx context.Context, cfg lifecycle.Config, c *client.Client, vars []model.Variable, init model.Params) (*lifecycle.Worker, int64, error) {
	w, err := lifecycle.New(cfg)
	if err != nil {
		return nil, 0, err
	}
	if err := w.Start(ctx, c, vars, func() model.Params { return init }); err != nil {
		w.Close()
		return nil, 0, err
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		w.Close()
		return nil, 0, fmt.Errorf("worker %d: start-up: %w", cfg.Cluster.Task.Index, err)
	}
	var step int64
	for _, st := range statuses {
		step = max(step, st.GetGlobalStep())
	}
	return w, step, nil
}

func modeName(sync bool) string {
	if sync {
		return "synchronously"
	}
	return "asynchronously"
}

// Step is the global step of the values last pulled.
func (s *Session) Step() int64 { return s.step }

// Sync reports whether the cluster trains synchronously, as the ps said.
func (s *Session) Sync() bool { return s.c.IsSync() }

// Worker is this worker's index (0 is the chief).
func (s *Session) Worker() int { return s.worker }

// NumWorkers is the number of workers of the cluster.
func (s *Session) NumWorkers() int { return len(s.cfg.Cluster.Spec.Workers) }

// Pull reads every variable into params (which holds a slice of the right
// size per variable) and returns the global step of the values read.
func (s *Session) Pull(ctx context.Context, params model.Params) (int64, error) {
	start := time.Now()
	step, err := s.pull(ctx, params)
	s.observe("pull", telemetry.Bytes{PullDense: denseBytes(params)}, start, err)
	if err == nil && s.calls != nil {
		s.calls.At(step)
	}
	return step, err
}

func (s *Session) pull(ctx context.Context, params model.Params) (int64, error) {
	for {
		step, err := s.c.Pull(ctx, 0, params)
		if err == nil {
			s.step = step
			return step, nil
		}
		if err := s.recover(ctx, err); err != nil {
			return s.step, err
		}
	}
}

// PushPull pushes grads, computed at the session's step (the values last
// pulled), and pulls the next values into params: in sync mode, once the
// step the push takes part in has completed; in async mode at once. It
// returns the new global step. After a ps failure it recovers (the
// gradients are lost) and returns the values and step it pulled then.
func (s *Session) PushPull(ctx context.Context, grads, params model.Params) (step int64, err error) {
	return s.PushPullRows(ctx, grads, params, nil)
}

// Rows are rows of a sparse table, gradients pushed or values pulled: Values holds len(Keys)×dim
// floats, row i for Keys[i]; Keys are distinct.
type Rows struct {
	Table  string
	Keys   []uint64
	Values []float32
}

// PushPullRows is PushPull that also pushes gradients of sparse rows in the
// same request, so that they count as one push of this worker's step (a
// PushRows of its own is a push of its own: in sync mode it would take the
// worker's place in the step). Each table appears once in rowGrads.
func (s *Session) PushPullRows(ctx context.Context, grads, params model.Params, rowGrads []Rows) (step int64, err error) {
	return s.pushStep(ctx, "push_pull", grads, params, rowGrads, nil)
}

// PushPullTables is PushPullRows that also reads rows of sparse tables in
// the same request: for each r of pullRows, the rows of r.Keys (distinct)
// of r.Table into r.Values (len(r.Keys)×dim values, row i for r.Keys[i]),
// read as params are, after this push is applied (in sync mode once the
// step it takes part in has completed). A worker that trains on a batch's
// rows pushes their gradients and pulls the next batch's rows with one
// round trip per ps instead of two calls. A table may appear in both
// lists, with the same keys or others; each appears once in each list.
// params may be nil (no dense values read back). After a ps failure it
// recovers (the gradients are lost), pulls params and the rows, and
// returns the step it went on from.
func (s *Session) PushPullTables(ctx context.Context, grads, params model.Params, rowGrads, pullRows []Rows) (step int64, err error) {
	return s.pushStep(ctx, "push_pull", grads, params, rowGrads, pullRows)
}

// Push is PushPullRows that reads no values back (params nil): it pushes
// grads and rowGrads as this worker's step and returns the new global step,
// in sync mode once the step the push takes part in has completed. The
// values of that step are for a Pull to read.
func (s *Session) Push(ctx context.Context, grads model.Params, rowGrads []Rows) (step int64, err error) {
	return s.pushStep(ctx, "push", grads, nil, rowGrads, nil)
}

// pushStep is PushPullRows and Push, the metrics' call named call.
func (s *Session) pushStep(ctx context.Context, call string, grads, params model.Params, rowGrads, pullRows []Rows) (step int64, err error) {
	start := time.Now()
	compute := start.Sub(s.returned)
	step, dropped, err := s.pushPullRows(ctx, grads, params, rowGrads, pullRows)
	return s.stepped(call, grads, params, rowGrads, pullRows, start, compute, step, dropped, err)
}

// stepped counts a push that started at start, after compute of the
// program's own time, and returns its step and error.
func (s *Session) stepped(call string, grads, params model.Params, rowGrads, pullRows []Rows, start time.Time, compute time.Duration,
	step int64, dropped bool, err error) (int64, error) {
	b := telemetry.Bytes{PushDense: denseBytes(grads), PullDense: denseBytes(params)}
	for _, r := range rowGrads {
		b.PushSparse += 8*int64(len(r.Keys)) + 4*int64(len(r.Values))
	}
	for _, r := range pullRows {
		b.PullSparse += 4 * int64(len(r.Values))
	}
	s.observe(call, b, start, err)
	if err == nil && s.calls != nil {
		s.local++
		s.calls.Stepped(s.worker, step, s.local, compute, s.returned.Sub(start), dropped)
	}
	if err == nil && s.sum != nil {
		s.sum.stepped(s.worker, step, dropped)
	}
	return step, err
}

// Sent is a PushPullTables sent by SendPushPullTables whose answers are
// not yet read. Land reads them; until then the session must not be used
// (a Sent is landed before the next call), and the buffers of the call
// are lent to it.
type Sent struct {
	s                  *Session
	ctx                context.Context
	call               *client.Call // nil when err refused the request
	err                error
	grads, params      model.Params
	rowGrads, pullRows []Rows
	start              time.Time
	compute            time.Duration
}

// SendPushPullTables is PushPullTables in two halves: it sends the request
// to every ps and returns without reading the answers, which the returned
// Sent's Land reads on the goroutine that calls it (client.Client.Send):
// meanwhile the ps apply the push and make the answers, and the caller
// computes its next batch, with no goroutine or thread of the library
// taking part. Asynchronous training: in sync mode the answers wait for
// the step to complete, and Land would wait without saying so; use
// PushPullTables there.
func (s *Session) SendPushPullTables(ctx context.Context, grads, params model.Params, rowGrads, pullRows []Rows) *Sent {
	p := &Sent{s: s, ctx: ctx, grads: grads, params: params, rowGrads: rowGrads, pullRows: pullRows, start: time.Now()}
	p.compute = p.start.Sub(s.returned)
	req, _, err := s.request(grads, params, rowGrads, pullRows)
	if err != nil {
		p.err = err
		return p
	}
	p.call = s.c.Send(ctx, req)
	return p
}

// Land reads the answers of the call sent and returns what PushPullTables
// would have: the new global step, or after a ps failure the step the
// session recovered to (params and the rows pulled again). Call it once.
func (p *Sent) Land() (int64, error) {
	s := p.s
	step, dropped, err := s.step, false, p.err
	if err == nil {
		_ = p.call.Wait() // its error is call.Err, which land reads
		step, dropped, err = s.land(p.ctx, p.call, p.params, p.pullRows)
	}
	return s.stepped("push_pull", p.grads, p.params, p.rowGrads, p.pullRows, p.start, p.compute, step, dropped, err)
}

func (s *Session) pushPullRows(ctx context.Context, grads, params model.Params, rowGrads, pullRows []Rows) (step int64, dropped bool, err error) {
	req, minStep, err := s.request(grads, params, rowGrads, pullRows)
	if err != nil {
		return s.step, false, err
	}
	return s.land(ctx, s.do(ctx, req, minStep), params, pullRows)
}

// request is the request of a push+pull at the session's step, checked,
// and the step its answer waits for (sync mode; else 0).
func (s *Session) request(grads, params model.Params, rowGrads, pullRows []Rows) (*client.Request, int64, error) {
	var minStep int64
	if s.c.IsSync() {
		minStep = s.step + 1
	}
	req := &client.Request{Push: true, Step: s.step, Grads: grads, Pull: true, MinStep: minStep, Params: params}
	for i, r := range rowGrads {
		for _, prev := range rowGrads[:i] {
			if prev.Table == r.Table {
				// An asynchronous ps would apply the two as two updates.
				return nil, 0, fmt.Errorf("session: worker %d: table %q twice in one push: give each table once, the gradients of a key summed", s.worker, r.Table)
			}
		}
		if len(r.Keys) > 0 {
			req.SparseGrads = append(req.SparseGrads, client.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values})
		}
	}
	for i, r := range pullRows {
		for _, prev := range pullRows[:i] {
			if prev.Table == r.Table {
				return nil, 0, fmt.Errorf("session: worker %d: table %q twice in one pull: give each table once, with all its keys", s.worker, r.Table)
			}
		}
		if len(r.Keys) > 0 {
			req.SparseParams = append(req.SparseParams, client.Rows{Table: r.Table, Keys: r.Keys, Values: r.Values})
		}
	}
	if err := s.checkFinite(grads, rowGrads); err != nil {
		return nil, 0, fmt.Errorf("session: worker %d: push of step %d: %w", s.worker, s.step, err)
	}
	return req, minStep, nil
}

// land takes in the answer of a push+pull that has landed: the new step
// (and a checkpoint that is due), or after a failure the recovery, params
// and pullRows pulled again.
func (s *Session) land(ctx context.Context, call *client.Call, params model.Params, pullRows []Rows) (step int64, dropped bool, err error) {
	newStep, err := call.Step, call.Err
	if err == nil {
		s.step = newStep
		if s.deferSaves {
			return newStep, call.Dropped, nil
		}
		if err := s.w.Stepped(ctx, newStep); err != nil {
			return newStep, call.Dropped, fmt.Errorf("session: worker %d: checkpoint of step %d: %w", s.worker, newStep, err)
		}
		return newStep, call.Dropped, nil
	}
	if err := s.recover(ctx, err); err != nil {
		return s.step, false, fmt.Errorf("session: worker %d: push of step %d: %w", s.worker, s.step, err)
	}
	step, err = s.pull(ctx, params)
	if err == nil && len(pullRows) > 0 {
		err = s.pullTables(ctx, pullRows)
	}
	return step, false, err
}

// checkFinite refuses gradients holding a NaN or an Inf before anything
// is sent, when the variables and rows are spread over several ps: each
// ps checks its own part and refuses it whole, but the others would apply
// theirs, leaving the model half updated. (One ps's check is the whole
// push's.)
func (s *Session) checkFinite(grads model.Params, rows []Rows) error {
	if len(s.cfg.Cluster.Spec.PS) < 2 {
		return nil
	}
	for _, v := range s.cfg.Variables {
		g := grads[v.Name]
		if i := firstNonFinite(g); i >= 0 {
			return fmt.Errorf("variable %q: gradient element %d is %v: nothing pushed", v.Name, i, g[i])
		}
	}
	for _, r := range rows {
		if i := firstNonFinite(r.Values); i >= 0 {
			dim := max(1, len(r.Values)/max(1, len(r.Keys)))
			key := "?"
			if i/dim < len(r.Keys) {
				key = fmt.Sprint(r.Keys[i/dim])
			}
			return fmt.Errorf("table %q: gradient of key %s element %d is %v: nothing pushed", r.Table, key, i%dim, r.Values[i])
		}
	}
	return nil
}

// firstNonFinite is the index of the first NaN or ±Inf of xs, -1 if none:
// the ps's own check (vector code on amd64), as it runs on every push.
var firstNonFinite = wire.FirstNonFinite

// do sends req and waits for its answer, logging every WaitLogEvery while
// it waits (a synchronous step completes only once enough workers have
// pushed), as the built-in loop does, so that a long wait says what it
// waits for.
func (s *Session) do(ctx context.Context, req *client.Request, minStep int64) *client.Call {
	stop := lifecycle.LogWait(s.cfg.WaitLogEvery, func(waited time.Duration) bool {
		hint := ""
		if minStep > 0 {
			hint = fmt.Sprintf(" (synchronous: step %d completes when %d of the %d workers have pushed)", minStep, s.cfg.ReplicasToAggregate, len(s.cfg.Cluster.Spec.Workers))
		}
		s.cfg.Logf("worker %d: push of step %d has waited %s for the ps%s", s.worker, req.Step, waited.Round(time.Second), hint)
		return true
	})
	call := s.c.Do(ctx, req)
	stop()
	return call
}

// PullRows reads the rows of keys (distinct) of table into out
// (len(keys)×dim values, row i for keys[i]).
func (s *Session) PullRows(ctx context.Context, table string, keys []uint64, out []float32) error {
	start := time.Now()
	err := s.pullRows(ctx, table, keys, out)
	s.observe("pull_rows", telemetry.Bytes{PullSparse: 4 * int64(len(out))}, start, err)
	return err
}

// PullRowsAside is PullRows for a pull made beside the program's work, a
// read-ahead of a later batch's rows: it is counted as a pull_rows call,
// but the program's own time (a step's compute in the metrics) is not cut
// where it returns, since the program did not wait for it.
func (s *Session) PullRowsAside(ctx context.Context, table string, keys []uint64, out []float32) error {
	start := time.Now()
	err := s.pullRows(ctx, table, keys, out)
	s.count("pull_rows", telemetry.Bytes{PullSparse: 4 * int64(len(out))}, start, err)
	return err
}

func (s *Session) pullRows(ctx context.Context, table string, keys []uint64, out []float32) error {
	for {
		_, err := s.c.PullRows(ctx, 0, table, keys, out)
		if err == nil {
			return nil
		}
		if err := s.recover(ctx, err); err != nil {
			return err
		}
	}
}

// PushRows pushes gradients (len(keys)×dim values) for the rows of keys
// (distinct) of table, computed at the session's step, as a push of its
// own (in sync mode it takes this worker's place in the step: use
// PushPullRows to push rows along with the dense gradients). After a ps
// failure it recovers and the gradients are lost.
func (s *Session) PushRows(ctx context.Context, table string, keys []uint64, grads []float32) error {
	start := time.Now()
	err := s.checkFinite(nil, []Rows{{Table: table, Keys: keys, Values: grads}})
	if err != nil {
		err = fmt.Errorf("session: worker %d: push of rows of %q: %w", s.worker, table, err)
	} else if _, _, err = s.c.PushRows(ctx, s.step, table, keys, grads); err != nil {
		err = s.recover(ctx, err)
	}
	s.observe("push_rows", telemetry.Bytes{PushSparse: 8*int64(len(keys)) + 4*int64(len(grads))}, start, err)
	return err
}

// ChangeRate changes the job's learning rate and schedule on every ps from
// global step ch.From on (variables and tables with their own rule keep
// theirs). Only the chief may; name a step ahead of every ps's so that all
// switch at the same step. The change is logged here and on each ps, and
// the ps keep it in their checkpoints.
func (s *Session) ChangeRate(ctx context.Context, ch optim.RateChange) error {
	if s.worker != 0 {
		return fmt.Errorf("session: worker %d: ChangeRate: only the chief (worker 0) changes the learning rate", s.worker)
	}
	at, err := s.c.ChangeRate(ctx, ch)
	if err != nil {
		return fmt.Errorf("session: worker %d: rate change: %w", s.worker, err)
	}
	late := ""
	if at > ch.From {
		late = fmt.Sprintf(" (a ps was already at step %d: it switched at its next update)", at)
	}
	s.cfg.Logf("learning rate %v, schedule %q, from global step %d%s", ch.LearningRate, ch.Schedule, ch.From, late)
	if s.sum != nil {
		s.sum.changed(ch)
	}
	return nil
}

// Done ends this worker's training: the chief saves the final checkpoint,
// then every ps is told this worker has finished.
func (s *Session) Done(ctx context.Context) error {
	start := time.Now()
	err := s.done(ctx)
	s.observe("done", telemetry.Bytes{}, start, err)
	return err
}

func (s *Session) done(ctx context.Context) error {
	if err := s.w.Finish(ctx, s.step); err != nil {
		return fmt.Errorf("session: worker %d: %w", s.worker, err)
	}
	if err := s.c.Done(ctx); err != nil {
		return fmt.Errorf("session: worker %d: done: %w", s.worker, err)
	}
	return nil
}

// Close closes the connections and the metrics endpoint, and gives up the
// chief's lock on its checkpoint directory if Done has not (a session
// closed without Done holds no directory: its heartbeat would outlive it).
func (s *Session) Close() error {
	s.w.Close()
	err := s.c.Close()
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
	if s.sum != nil {
		if serr := s.sum.close(); serr != nil {
			s.cfg.Logf("summaries: %v", serr)
		}
	}
	return err
}

// MetricsAddr is the address the metrics are served at (HOST:PORT, the
// port chosen when Config.MetricsAddr's was 0), or "" without metrics.
func (s *Session) MetricsAddr() string {
	if s.srv == nil {
		return ""
	}
	return s.srv.Addr
}

// ReportLoss records the training loss of the program's latest batch, at
// the global step of the values last pulled, and the batch's examples (0:
// not counted), for the metrics (paramserv_worker_loss,
// paramserv_worker_examples_total), the status page's loss curve and
// paramserv local's progress line, and the chief's summaries
// (Config.SummaryDir). It does nothing without either. Unlike
// the other methods it may be called while another call is in flight.
func (s *Session) ReportLoss(loss float64, examples int) {
	if s.sum != nil {
		s.sum.reported(loss, examples)
	}
	if s.calls != nil {
		s.calls.Loss(loss, examples)
	}
}

// observe counts a call that started at start, with metrics; the program's
// own time runs from now to its next push.
func (s *Session) observe(call string, b telemetry.Bytes, start time.Time, err error) {
	s.returned = s.count(call, b, start, err)
}

// count counts a call that started at start, with metrics, and returns
// the time it ended.
func (s *Session) count(call string, b telemetry.Bytes, start time.Time, err error) time.Time {
	now := time.Now()
	if s.calls != nil {
		s.calls.Call(call, b, now.Sub(start), err)
	}
	return now
}

// denseBytes is the bytes of dense values in p.
func denseBytes(p model.Params) int64 {
	var n int64
	for _, v := range p {
		n += 4 * int64(len(v))
	}
	return n
}

// recover returns cause itself when it is not a failure the session
// recovers from; otherwise it waits for the ps to come back as the built-in
// loop does (lifecycle.Worker.Recover), up to RecoveryTimeout.
func (s *Session) recover(ctx context.Context, cause error) error {
	err := s.w.Recover(ctx, s.step, cause)
	if err == nil && s.calls != nil {
		s.calls.Recovered()
	}
	if err != nil {
		if err == cause || strings.Contains(err.Error(), cause.Error()) {
			return err // it names the cause already (the lifecycle's "recovery after …")
		}
		return fmt.Errorf("session: worker %d: recovery after %v: %w", s.worker, cause, err)
	}
	return nil
}
