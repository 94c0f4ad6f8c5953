// Package server is the parameter-server process: a gRPC service and a
// binary data path around one shard (package shard), the state machine
// that holds the variables, tables, optimizer state and tracker.
//
// The server is a thin shell. Both front ends decode requests into the
// shard's Push type, call the same Check and Apply, and answer the shard's
// errors (shard.Error, of a Kind): the data path sends the kind as it is,
// gRPC maps it to a status code (statusOf). Everything of gRPC (the
// service's methods, options, credentials, interceptors, statuses) is in
// one file, grpc.go; the work each method does is in the method of the
// same name in lower case (push, pull, writeCheckpoint, ...), which
// returns the shard's errors. What the shell adds is
// what the state machine must not have: a lock, waiting, clocks, sockets,
// files.
//
// Concurrency: every RPC runs on its own gRPC goroutine and every data
// connection on its own goroutine. One mutex, mu, guards the shard, so a
// push is applied atomically with respect to pulls and other pushes. A pull
// that must wait for a step (synchronous mode) waits outside the lock on a
// channel that is closed whenever the shard's version changes (the step
// advanced, a restore, a failed step).
package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/parallel/goroutines"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Config configures one ps task.
type Config struct {
	Task       int // this ps's index
	NumPS      int // ps tasks in the cluster (sparse keys are placed by it); 1 if 0
	NumWorkers int // workers in the cluster; the ps exits once all are done
	// WaitForever keeps the ps serving after every worker has finished
	// (TensorFlow's old behaviour).
	WaitForever bool
	// Logf receives the log lines; nil discards them.
	Logf func(format string, args ...any)
	// WaitLogEvery is how often a waiting pull logs what it waits for
	// (default 5s).
	WaitLogEvery time.Duration
	// HandshakeTimeout bounds a new connection's handshake, from its
	// accept to its preface (default 10s; mux.go).
	HandshakeTimeout time.Duration
	// CheckpointDir, if set, is where checkpoints live: at start the ps
	// restores its shard of the latest valid one. Checkpoint and Restore
	// requests may name no other directory.
	CheckpointDir string
	// FS is the filesystem for checkpoints (vfs.OS if nil).
	FS vfs.FS
	// Observer, if set, is told what the ps does (metrics).
	Observer Observer
	// ProgressEvery is how often a long restore logs how far it has come
	// (progress.DefaultEvery if 0); Clock is its clock (time.Now if nil).
	ProgressEvery time.Duration
	Clock         func() time.Time
	// Incarnation, if set, gives the shard its incarnation ids (random if
	// nil): the copies of a replicated shard share theirs, so a failover
	// is not taken for a restart (docs/REPLICATION.md).
	Incarnation func() uint64
	// Replicated, if set, is the replicated shard this server is a copy
	// of (--replicas): the data path hands it each push, to be logged and
	// applied by every copy in log order, and asks it before each pull
	// whether this copy serves (replicated.go).
	Replicated Replicated
	// Aggregated, if set, is told each completed synchronous step's
	// averaged dense gradients, before they are applied
	// (shard.Config.Aggregated): a replicated shard's primary logs them
	// for its backups, which apply them with ApplyAggregate.
	Aggregated func(step int64, grads [][]float32, rows []shard.RowGrads)
	// MaxTableKeys, if positive, caps the keys each sparse table holds on
	// this ps (shard.Config.MaxTableKeys; --max_table_keys).
	MaxTableKeys int
	// MaxBuffered bounds the bytes of requests all data connections hold
	// together (membound.go); 0: 2 × (NumWorkers + 1) requests of the
	// largest size the layout allows, at least 64 MiB.
	MaxBuffered int64
	// MaxGRPCBuffered bounds the bytes all gRPC calls hold together
	// (membound.go); 0: 2 × (NumWorkers + 1) calls of the largest request,
	// at least 64 MiB.
	MaxGRPCBuffered int64
	// Tiers, if set, gives the sparse tables a second tier on disk
	// (shard.Config.Tiers; internal/table/tier), whose background work
	// takes the server's lock (Lock).
	Tiers shard.Tiers
}

// Server implements pb.ParamServerServer. Create it with New.
type Server struct {
	pb.UnimplementedParamServerServer
	cfg Config

	mu         sync.Mutex // guards every field below
	shard      *shard.Shard
	stepCh     chan struct{}     // closed and replaced when the shard's version changes, if waited on
	stepWaited bool              // a pull waits on stepCh
	version    uint64            // the shard's version stepCh was made for
	allDone    chan struct{}     // closed once every worker has called Done
	closed     bool              // allDone is closed
	seen       map[int]time.Time // when each worker was last heard from (a push, a pull, Init, Done, Status)
	gaveUp     map[int]GaveUp    // the workers that said they gave up
	savedStep  int64             // the step of the last checkpoint shard written, or -1
	limits     bufLimits         // the data path's bounds for the shard's state (membound.go)

	coll gatherings // the workers' barriers and all-reduces (collective.go), under its own lock

	buffered atomic.Int64 // bytes the data connections hold (membound.go)
	// grpcHeld is the bytes the gRPC calls hold, grpcLimit their bound for
	// the layout dataLimits last computed (0: none yet), and initPieces is
	// held by the one Init being received in pieces (membound.go).
	grpcHeld   atomic.Int64
	grpcLimit  atomic.Int64
	initPieces sync.Mutex
	freeing    atomic.Bool // a goroutine returns freed memory to the system

	stalls saveStalls // pushes during a save (savestall.go)
}

// New returns an uninitialised server; the chief's Init gives it variables.
// parallelMin is the fewest values whose update New's shard spreads over
// the cores. Below it, waking a second goroutine costs more than the half
// of the update it saves on a busy machine: a 1 MiB push+pull (256k values,
// sgd about 60 us) was 1.43x the bare socket with the update split in two
// and 1.26-1.30x with it on one goroutine (2 cores, alternating runs).
const parallelMin = 1 << 20

// updateRunner is what spreads the update of a variable of n values: the
// cores, or the caller's goroutine alone below parallelMin.
func updateRunner(n int) parallel.Runner {
	if n < parallelMin {
		return parallel.Serial
	}
	return goroutines.OnCores()
}

func New(cfg Config) *Server {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.WaitLogEvery <= 0 {
		cfg.WaitLogEvery = 5 * time.Second
	}
	if cfg.NumPS <= 0 {
		cfg.NumPS = 1
	}
	if cfg.FS == nil {
		cfg.FS = vfs.OS
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	sh := shard.New(shard.Config{
		Task: cfg.Task, NumPS: cfg.NumPS, NumWorkers: cfg.NumWorkers, Logf: cfg.Logf, Incarnation: cfg.Incarnation,
		Aggregated: cfg.Aggregated, Tiers: cfg.Tiers,
		// A copy of a replicated shard reads rows without changing its
		// tables; the changes a pull makes come through the shard's log.
		PeekPulls:    cfg.Replicated != nil,
		MaxTableKeys: cfg.MaxTableKeys,
		// A large variable's update is spread over the cores (bit for bit
		// one Update); a worker waiting for its reply leaves them idle.
		Update: func(r optim.Rule, param, grad []float32, state [][]float32, step int64) {
			optim.ApplyParallel(r, param, grad, state, step, updateRunner(len(param)))
		},
		// Checkpoint copies, sorts and restores of large sparse tables
		// likewise.
		Parallel: goroutines.OnCores(),
	})
	return &Server{cfg: cfg, shard: sh, stepCh: make(chan struct{}), allDone: make(chan struct{}), seen: make(map[int]time.Time),
		gaveUp: make(map[int]GaveUp), savedStep: -1}
}

// GaveUp is a worker's word that it gave up on the job (DoneRequest's
// gave_up): why, and when the ps heard it. A worker heard from after At is
// back.
type GaveUp struct {
	Why string
	At  time.Time
}

// WorkersGaveUp reports the workers that said they gave up, with why.
func (s *Server) WorkersGaveUp() map[int]GaveUp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.gaveUp)
}

// JobOver reports whether this ps knows the job reached its goal: the
// goal step is known (the chief's Init or the restored checkpoint), the
// shard is at it, and, with a checkpoint directory, a checkpoint at the
// goal was written or restored (the chief's final one). final says the
// state was restored from that checkpoint: the job had ended before this
// ps started. Nothing the workers push changes the parameters then.
func (s *Server) JobOver() (over, final bool, goal int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	goal = s.shard.GoalStep()
	if goal <= 0 || s.shard.Step() < goal {
		return false, false, goal
	}
	final = s.shard.RestoredStep() >= goal
	return s.cfg.CheckpointDir == "" || final || s.savedStep >= goal, final, goal
}

// WorkerActivity reports the workers that have called Done, and when each
// worker was last heard from (a push, a pull, Init or Done); a worker never
// heard from is not in lastSeen.
func (s *Server) WorkerActivity() (done []int, lastSeen map[int]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lastSeen = make(map[int]time.Time, len(s.seen))
	for w, t := range s.seen {
		lastSeen[w] = t
	}
	return s.shard.DoneWorkers(), lastSeen
}

// HeardOf records what another copy of the shard, its primary, heard:
// when it last heard from each worker (ago, by worker; a worker's time
// moves only forward). A backup copy hears a worker's calls only so, but
// for the pushes, Init and Done the shard's log brings it; its watch over
// the workers (WorkerActivity) then sees what its primary sees.
func (s *Server) HeardOf(ago map[int]time.Duration) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, d := range ago {
		if t := now.Add(-d); w >= 0 && w < s.cfg.NumWorkers && t.After(s.seen[w]) {
			s.seen[w] = t
		}
	}
}

// GiveUp makes every later push and waiting pull fail with err, an error
// the worker does not retry: the ps's watch over its workers gave up on
// the job, and the workers waiting on it read why before the ps exits.
func (s *Server) GiveUp(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shard.Fail(err)
	s.notify()
}

// Failed is the error every push and waiting pull fails with once the
// ps gave up on the job (GiveUp), as the workers read it; nil before.
func (s *Server) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return statusOf(s.shard.Failed())
}

// heard records that worker w was heard from. Call with mu held.
func (s *Server) heard(w int32) {
	if w >= 0 && int(w) < s.cfg.NumWorkers {
		s.seen[int(w)] = time.Now()
	}
}

// Lock is the lock that guards the server's shard: a second tier's
// background work (Config.Tiers) holds it while it moves rows.
func (s *Server) Lock() sync.Locker { return &s.mu }

// AllDone is closed once every worker has reported Done. The caller stops
// the gRPC server then (unless Config.WaitForever).
func (s *Server) AllDone() <-chan struct{} { return s.allDone }

// notify wakes every pull waiting on the shard if its version changed.
// Call with mu held, after every call that may change the shard.
func (s *Server) notify() {
	if v := s.shard.Version(); v != s.version {
		s.version = v
		if s.stepWaited {
			close(s.stepCh)
			s.stepCh = make(chan struct{})
			s.stepWaited = false
		}
	}
}

// layoutOf decodes an Init request's layout and values.
func layoutOf(req *pb.InitRequest) (shard.Layout, [][]float32, error) {
	l := shard.Layout{
		Optimizer:           optimConfig(req.Optimizer),
		Sync:                req.Sync,
		ReplicasToAggregate: int(req.ReplicasToAggregate),
		NumWorkers:          int(req.NumWorkers),
		MaxStaleness:        req.MaxStaleness,
		SyncTimeout:         time.Duration(req.SyncTimeoutMs) * time.Millisecond,
		SyncProceed:         req.SyncProceed,
		SplitBytes:          req.SplitBytes,
		GlobalStep:          req.GlobalStep,
		GoalStep:            max(req.GoalStep, 0),
	}
	values := make([][]float32, len(req.Vars))
	for i, v := range req.Vars {
		l.Vars = append(l.Vars, shard.VarSpec{Name: v.Name, Shape: v.Shape, Optimizer: ownOptimizer(v.Optimizer)})
		if len(v.Init)%4 != 0 {
			return l, nil, fmt.Errorf("variable %q: %d bytes of initial values is not a whole number of float32", v.Name, len(v.Init))
		}
		values[i] = make([]float32, len(v.Init)/4)
		wire.DecodeFloat32s(values[i], v.Init)
	}
	for _, t := range req.Tables {
		l.Tables = append(l.Tables, TableSpec(t))
	}
	return l, values, nil
}

// TableSpec converts a generated table spec to the shard's.
func TableSpec(t *pb.TableSpec) shard.TableSpec {
	return shard.TableSpec{
		Name: t.Name, Dim: t.Dim, Initializer: t.Initializer, InitStddev: t.InitStddev,
		Seed: t.Seed, MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps,
		Optimizer: ownOptimizer(t.Optimizer),
	}
}

// ownOptimizer is a variable's or table's own update rule; unset is nil
// (the job's rule).
func ownOptimizer(c *pb.OptimizerConfig) *optim.Config {
	if c == nil {
		return nil
	}
	o := optimConfig(c)
	return &o
}

// initialize does the work of Init.
func (s *Server) initialize(req *pb.InitRequest) (*pb.InitResponse, error) {
	l, values, err := layoutOf(req)
	if err != nil {
		return nil, &shard.Error{Kind: shard.Invalid, Msg: err.Error()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(req.Worker)
	already, err := s.shard.Init(l, values)
	s.notify()
	if err != nil {
		return nil, err
	}
	if !already {
		st := s.shard.Status()
		s.cfg.Logf("initialised by worker %d: %d variables, %d sparse tables, optimizer %s, %s, global step %d",
			req.Worker, len(l.Vars), len(l.Tables), describeRule(s.shard.Layout().Optimizer), describeMode(l), st.GlobalStep)
		// The request's initial values (as large as the model, and copied
		// by gRPC and protobuf on the way in) are garbage now: give their
		// memory back rather than leave it in the ps's resident set.
		debug.FreeOSMemory()
	}
	return &pb.InitResponse{AlreadyInitialized: already, GlobalStep: s.shard.Step()}, nil
}

// describeRule is the job's rule for the log: its name, rate and schedule.
func describeRule(c optim.Config) string {
	if c.Schedule == "" {
		return fmt.Sprintf("%s at rate %v", c.Name, c.LearningRate)
	}
	return fmt.Sprintf("%s at rate %v, schedule %s", c.Name, c.LearningRate, c.Schedule)
}

func describeMode(l shard.Layout) string {
	if l.Sync {
		return fmt.Sprintf("sync, %d of %d workers per step", l.ReplicasToAggregate, l.NumWorkers)
	}
	return "async"
}

func optimConfig(c *pb.OptimizerConfig) optim.Config {
	if c == nil {
		return optim.Config{}
	}
	return optim.Config{
		Name: c.Name, LearningRate: c.LearningRate, Momentum: c.Momentum, Nesterov: c.Nesterov,
		InitialAccumulator: c.InitialAccumulator, Beta1: c.Beta1, Beta2: c.Beta2, Epsilon: c.Epsilon,
		FTRLBeta: c.FtrlBeta, L1: c.L1, L2: c.L2, L2Shrinkage: c.L2Shrinkage,
		Rho: c.Rho, Centered: c.Centered, WeightDecay: c.WeightDecay, Schedule: c.Schedule,
		LearningRatePower: c.LearningRatePower,
	}
}

// decodePush decodes a gRPC push into the shard's Push type.
func decodePush(req *pb.PushRequest, p *shard.Push) error {
	*p = shard.Push{Worker: int(req.Worker), Step: req.Step}
	for _, g := range req.Grads {
		f, err := wire.Float32s(g.Data)
		if err != nil {
			return fmt.Errorf("variable %q: %w", g.Name, err)
		}
		p.Dense = append(p.Dense, shard.DenseGrad{Name: []byte(g.Name), Values: f, Bad: shard.Unchecked})
	}
	for _, r := range req.Sparse {
		keys, err := wire.Uint64s(r.Keys)
		if err != nil {
			return fmt.Errorf("table %q: %w", r.Table, err)
		}
		vals, err := wire.Float32s(r.Values)
		if err != nil {
			return fmt.Errorf("table %q: %w", r.Table, err)
		}
		p.Sparse = append(p.Sparse, shard.SparseGrad{Table: []byte(r.Table), Keys: keys, Values: vals, Bad: shard.Unchecked})
	}
	return nil
}

// push does the work of Push with mu held.
func (s *Server) push(req *pb.PushRequest) (*pb.PushResponse, error) {
	s.heard(req.Worker)
	var p shard.Push
	if err := decodePush(req, &p); err != nil && s.shard.Initialized() {
		s.cfg.Observer.Rejected(shard.Invalid.String())
		return nil, s.shard.Reject(p.Worker, p.Step, err)
	}
	res, err := s.apply(&p, nil)
	if err != nil {
		return nil, err
	}
	return &pb.PushResponse{GlobalStep: res.Step, Dropped: res.Dropped(), DropReason: dropReason(res), Incarnation: s.shard.Incarnation()}, nil
}

func dropReason(r shard.Result) string {
	if r.Dropped() {
		return r.Verdict.String()
	}
	return ""
}

// apply checks and applies a push. Call with mu held.
func (s *Server) apply(p *shard.Push, stream *shard.Stream) (shard.Result, error) {
	start := time.Now()
	if err := s.shard.Check(p); err != nil {
		s.cfg.Observer.Rejected(rejectReason(err))
		return shard.Result{}, err
	}
	res, err := s.shard.Apply(p, start, stream)
	s.notify()
	if err != nil {
		s.cfg.Observer.Rejected(rejectReason(err))
	} else {
		dense, sparse := pushBytes(p)
		s.cfg.Observer.Pushed(res.Verdict.String(), dense, sparse, time.Since(start))
	}
	return res, err
}

// pull waits (releasing mu) until the step reaches req.MinStep, then reads.
// Call with mu held; it returns with mu held.
func (s *Server) pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	start := time.Now()
	if !s.shard.Initialized() {
		return nil, s.notInitialized()
	}
	if err := s.waitStep(ctx, int(req.Worker), req.MinStep); err != nil {
		return nil, err
	}
	resp := &pb.PullResponse{GlobalStep: s.shard.Step(), Incarnation: s.shard.Incarnation()}
	add := func(v *shard.Var) {
		// Copy: the value changes after mu is released, before gRPC
		// marshals.
		l := v.LeaseValues()
		resp.Vars = append(resp.Vars, &pb.DenseTensor{Name: v.Name(), Data: slices.Clone(wire.Float32Bytes(l.Values()))})
		l.Release()
	}
	switch {
	case len(req.Names) > 0:
		for _, name := range req.Names {
			v := s.shard.Var(name)
			if v == nil {
				return nil, kindErrorf(shard.Invalid, "ps %d: unknown variable %q", s.cfg.Task, name)
			}
			add(v)
		}
	case !req.NoDense:
		for _, v := range s.shard.Vars() {
			add(v)
		}
	}
	for _, r := range req.Sparse {
		keys, err := wire.Uint64s(r.Keys)
		if err != nil {
			return nil, kindErrorf(shard.Invalid, "ps %d: table %q: %v", s.cfg.Task, r.Table, err)
		}
		dim, err := s.shard.TableDim([]byte(r.Table))
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(keys)*dim)
		if err := s.shard.PullRows([]byte(r.Table), keys, nil, false, out); err != nil {
			return nil, err
		}
		resp.Sparse = append(resp.Sparse, &pb.SparseRows{Table: r.Table, Keys: r.Keys, Values: wire.Float32Bytes(out)})
	}
	dense, sparse := 0, 0
	for _, v := range resp.Vars {
		dense += len(v.Data)
	}
	for _, r := range resp.Sparse {
		sparse += len(r.Values)
	}
	s.cfg.Observer.Pulled(dense, sparse, time.Since(start))
	return resp, nil
}

// waitStep blocks until the step reaches min, logging every WaitLogEvery
// what it waits for. In synchronous mode it also drives the shard's step
// timeout (Tick). A restore while waiting aborts the wait. Call with mu
// held; mu is released while waiting.
func (s *Server) waitStep(ctx context.Context, worker int, min int64) error {
	s.heard(int32(worker))
	start := time.Now()
	epoch := s.shard.Epoch()
	lastLog := start
	var tick *time.Ticker
	if !s.shard.Ready(min) {
		defer func() { s.cfg.Observer.SyncWaited(time.Since(start)) }()
	}
	for !s.shard.Ready(min) {
		if err := s.shard.Failed(); err != nil {
			return err
		}
		if tick == nil {
			every := s.cfg.WaitLogEvery
			if t := s.shard.SyncTimeout(); t > 0 {
				every = max(min64dur(every, t/4), 10*time.Millisecond)
			}
			tick = time.NewTicker(every)
			defer tick.Stop()
		}
		ch := s.stepCh
		s.stepWaited = true
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case now := <-tick.C:
			s.mu.Lock()
			s.shard.Tick(now)
			s.notify()
			if time.Since(lastLog) >= s.cfg.WaitLogEvery {
				lastLog = time.Now()
				have, want, missing := s.shard.Waiting()
				s.cfg.Logf("worker %d has waited %s for step %d: shard at step %d with %d of %d gradients (no gradient yet from workers %v)",
					worker, time.Since(start).Round(time.Second), min, s.shard.Step(), have, want, missing)
			}
		case <-ctx.Done():
			s.mu.Lock()
			// A worker that gave up reads no answer; one that does reads
			// this because the ps is stopping (its calls are cancelled),
			// and must wait for it to come back, as for a ps gone, not take
			// the cancellation for its own and fail.
			return &stoppingError{fmt.Sprintf("ps %d: stopping while worker %d waited for step %d (%v)", s.cfg.Task, worker, min, ctx.Err())}
		}
		if s.shard.Epoch() != epoch {
			return &shard.Error{Kind: shard.Restored, Msg: fmt.Sprintf("ps %d was restored to step %d while this pull waited for step %d: pull again", s.cfg.Task, s.shard.Step(), min)}
		}
	}
	return nil
}

func min64dur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// pushPull does the work of PushPull.
func (s *Server) pushPull(ctx context.Context, req *pb.PushPullRequest) (*pb.PullResponse, error) {
	if req.Push == nil || req.Pull == nil {
		return nil, &shard.Error{Kind: shard.Invalid, Msg: "PushPull needs both push and pull"}
	}
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	locked := time.Now()
	pr, err := s.push(req.Push)
	s.stalls.push(start, locked)
	if err != nil {
		return nil, err
	}
	resp, err := s.pull(ctx, req.Pull)
	if err != nil {
		return nil, err
	}
	resp.Push = pr
	return resp, nil
}

// report does the work of Status: the shard's state, once it is
// initialised or wait has passed (or ctx ended).
func (s *Server) report(ctx context.Context, req *pb.StatusRequest, wait time.Duration) *pb.StatusResponse {
	s.mu.Lock()
	if req != nil && req.Worker != nil {
		// A worker waiting for the chief or checking the ps's health is
		// heard from too: it is there, not "never heard from".
		s.heard(req.GetWorker())
	}
	if wait > 0 && !s.shard.Status().Initialized {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for waiting := true; waiting && !s.shard.Status().Initialized; {
			ch := s.stepCh
			s.stepWaited = true
			s.mu.Unlock()
			select {
			case <-ch:
			case <-timer.C:
				waiting = false
			case <-ctx.Done():
				waiting = false
			}
			s.mu.Lock()
		}
	}
	st := s.shard.Status()
	var details *pb.StatusResponse
	if req.GetDetails() {
		details = s.details()
	}
	s.mu.Unlock()
	resp := &pb.StatusResponse{
		Incarnation:    st.Incarnation,
		RestoredStep:   st.RestoredStep,
		Task:           int32(st.Task),
		Initialized:    st.Initialized,
		RejectedPushes: st.RejectedPushes,
		WorkersDone:    int32(st.WorkersDone),
		NumWorkers:     int32(st.NumWorkers),
		GlobalStep:     st.GlobalStep,
		StaleDropped:   st.StaleDropped,
		AppliedPushes:  st.AppliedPushes,
		Mode:           st.Mode,
		LearningRate:   st.LearningRate,
	}
	for _, t := range st.Tables {
		resp.Tables = append(resp.Tables, &pb.TableStatus{
			Name: t.Name, Rows: t.Rows, Bytes: t.Bytes, Admitted: t.Admitted,
			Evicted: t.Evicted, RejectedByAdmission: t.RejectedByAdmission,
			DiskRows: t.TierRows, DiskLookups: t.TierLookups, DiskHits: t.TierHits,
		})
	}
	if details != nil {
		resp.Vars, resp.Workers, resp.CheckpointDir = details.Vars, details.Workers, details.CheckpointDir
	}
	return resp
}

// details reports the variables, every worker's activity and the
// checkpoint directory (a Status request's details). Call with mu held.
func (s *Server) details() *pb.StatusResponse {
	out := &pb.StatusResponse{CheckpointDir: s.cfg.CheckpointDir}
	if s.shard.Initialized() {
		for _, v := range s.shard.Vars() {
			out.Vars = append(out.Vars, &pb.VarStatus{Name: v.Name(), Elements: int64(v.Len())})
		}
	}
	done := s.shard.DoneWorkers()
	now := time.Now()
	for w := 0; w < s.cfg.NumWorkers; w++ {
		a := &pb.WorkerActivity{Worker: int32(w), LastSeenMsAgo: -1, Done: slices.Contains(done, w)}
		if t, ok := s.seen[w]; ok {
			a.LastSeenMsAgo = now.Sub(t).Milliseconds()
		}
		out.Workers = append(out.Workers, a)
	}
	return out
}

// changeRate does the work of ChangeRate.
func (s *Server) changeRate(req *pb.ChangeRateRequest) (*pb.ChangeRateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(req.Worker)
	err := s.shard.ChangeRate(optim.RateChange{From: req.FromStep, LearningRate: req.LearningRate, Schedule: req.Schedule})
	if err != nil {
		return nil, err
	}
	return &pb.ChangeRateResponse{GlobalStep: s.shard.Step()}, nil
}

// done does the work of Done.
func (s *Server) done(req *pb.DoneRequest) (*pb.DoneResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(req.Worker)
	if req.GaveUp != "" {
		if req.Worker >= 0 && int(req.Worker) < s.cfg.NumWorkers {
			s.gaveUp[int(req.Worker)] = GaveUp{Why: req.GaveUp, At: time.Now()}
			s.cfg.Logf("worker %d gave up: %s", req.Worker, req.GaveUp)
		}
		return &pb.DoneResponse{}, nil
	}
	all, err := s.shard.Done(int(req.Worker))
	if err != nil {
		return nil, err
	}
	if all && !s.closed {
		s.closed = true
		close(s.allDone)
	}
	return &pb.DoneResponse{}, nil
}

// kindErrorf is an error of kind k with a message made as fmt.Errorf
// makes it: what the shard's own errors are, so that gRPC (statusOf) and
// the data path (kindOf) answer it alike.
func kindErrorf(k shard.Kind, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &shard.Error{Kind: k, Msg: err.Error(), Err: errors.Unwrap(err)}
}
