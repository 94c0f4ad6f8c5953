// Package server is the parameter-server process: a gRPC service that holds
// one shard of the variables with their optimizer state, and applies pushed
// gradients as the consistency tracker decides.
//
// Concurrency: every RPC runs on its own gRPC goroutine. One mutex, mu,
// guards the shard's whole state (variables, tracker, counters), so a push
// is applied atomically with respect to pulls and other pushes. A pull that
// must wait for a step (synchronous mode) waits outside the lock on a
// channel that is closed whenever the step advances.
package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/optim"
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
	// CheckpointDir, if set, is where checkpoints live: at start the ps
	// restores its shard of the latest valid one.
	CheckpointDir string
	// FS is the filesystem for checkpoints (vfs.OS if nil).
	FS vfs.FS
}

// Server implements pb.ParamServerServer. Create it with New.
type Server struct {
	pb.UnimplementedParamServerServer
	cfg Config

	mu          sync.Mutex // guards every field below
	initialized bool
	layout      []*pb.VarSpec // as given to Init, for checking a repeated Init
	tableLayout []*pb.TableSpec
	vars        map[string]*denseVar
	tables      map[string]*sparseTable
	rule        optim.Rule
	tracker     *consistency.Tracker
	stepCh      chan struct{} // closed and replaced each time the step advances, if waited on
	stepWaited  bool          // a pull waits on stepCh
	rejected    int64         // pushes refused as malformed
	done        map[int32]bool
	allDone     chan struct{} // closed once every worker has called Done
	closed      bool          // allDone is closed

	seen map[int32]time.Time // when each worker was last heard from (a push, a pull, Init, Done)

	initReq      *pb.InitRequest // the mode and layout (no values), for checkpoints
	incarnation  uint64          // new at start and at each restore; sent in every answer
	restoredStep int64           // the checkpoint step this incarnation restored, or -1
	epoch        int64           // counts restores: a pull waiting across one is aborted
	syncTimeout  time.Duration   // sync: how long a step waits for missing gradients
	syncProceed  bool            // sync: after the timeout complete with what came, else fail
	pendingSince time.Time       // sync: when the current step got its first gradient
	syncFailed   error           // sync: set once a step timed out with --sync_on_timeout=fail
}

type denseVar struct {
	name    string
	shape   []int64
	value   []float32 // lent to replies in flight: see lend (lease.go) before writing it
	state   [][]float32
	accum   []float32 // sync: sum of the current step's gradients
	updates int64     // updates applied, for Adam's bias correction
	lent    lentBufs
}

// New returns an uninitialised server; the chief's Init gives it variables.
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
	return &Server{
		incarnation:  newIncarnation(),
		restoredStep: -1,
		cfg:          cfg,
		vars:         make(map[string]*denseVar),
		tables:       make(map[string]*sparseTable),
		stepCh:       make(chan struct{}),
		done:         make(map[int32]bool),
		seen:         make(map[int32]time.Time),
		allDone:      make(chan struct{}),
	}
}

// AllDone is closed once every worker has reported Done. The caller stops
// the gRPC server then (unless Config.WaitForever).
func (s *Server) AllDone() <-chan struct{} { return s.allDone }

// WorkerActivity reports the workers that have called Done, and when each
// worker was last heard from (a push, a pull, Init or Done); a worker never
// heard from is not in lastSeen.
func (s *Server) WorkerActivity() (done []int, lastSeen map[int]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.done {
		done = append(done, int(w))
	}
	slices.Sort(done)
	lastSeen = make(map[int]time.Time, len(s.seen))
	for w, t := range s.seen {
		lastSeen[int(w)] = t
	}
	return done, lastSeen
}

// heard records that worker w was heard from. Call with mu held.
func (s *Server) heard(w int32) {
	if w >= 0 && int(w) < s.cfg.NumWorkers {
		s.seen[w] = time.Now()
	}
}

// Init creates the shard's variables and sets the mode. A repeated Init with
// the same layout (a restarted chief) changes nothing and reports the step.
func (s *Server) Init(_ context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard(req.Worker)
	if s.initialized {
		err := sameLayout(s.layout, req.Vars)
		if err == nil {
			err = sameTables(s.tableLayout, req.Tables)
		}
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "ps %d is already initialised with a different layout: %v", s.cfg.Task, err)
		}
		return &pb.InitResponse{AlreadyInitialized: true, GlobalStep: s.tracker.Step()}, nil
	}
	if int(req.NumWorkers) != s.cfg.NumWorkers {
		return nil, status.Errorf(codes.InvalidArgument, "chief says %d workers, ps %d was started with %d in --worker_hosts", req.NumWorkers, s.cfg.Task, s.cfg.NumWorkers)
	}
	st, err := build(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.install(st, req)
	s.cfg.Logf("initialised by worker %d: %s", req.Worker, st.describe())
	return &pb.InitResponse{GlobalStep: st.tracker.Step()}, nil
}

// shardState is everything Init (or a restore) gives a shard.
type shardState struct {
	vars    map[string]*denseVar
	tables  map[string]*sparseTable
	rule    optim.Rule
	tracker *consistency.Tracker
	sync    bool
	r, n    int32
}

func (st *shardState) describe() string {
	mode := "async"
	if st.sync {
		mode = fmt.Sprintf("sync, %d of %d workers per step", st.r, st.n)
	}
	return fmt.Sprintf("%d variables, %d sparse tables, optimizer %s, %s, global step %d", len(st.vars), len(st.tables), st.rule.Name(), mode, st.tracker.Step())
}

// build makes a shard's state from an Init request, checking everything.
func build(req *pb.InitRequest) (*shardState, error) {
	rule, err := optim.New(optimConfig(req.Optimizer))
	if err != nil {
		return nil, err
	}
	tracker, err := consistency.New(consistency.Config{
		Sync:                req.Sync,
		ReplicasToAggregate: int(req.ReplicasToAggregate),
		NumWorkers:          int(req.NumWorkers),
		MaxStaleness:        req.MaxStaleness,
	}, req.GlobalStep)
	if err != nil {
		return nil, err
	}
	vars := make(map[string]*denseVar, len(req.Vars))
	for _, spec := range req.Vars {
		n := int64(1)
		for _, d := range spec.Shape {
			if d <= 0 {
				return nil, fmt.Errorf("variable %q: shape %v has a dimension <= 0", spec.Name, spec.Shape)
			}
			n *= d
		}
		if _, dup := vars[spec.Name]; dup {
			return nil, fmt.Errorf("variable %q given twice", spec.Name)
		}
		if int64(len(spec.Init)) != 4*n {
			return nil, fmt.Errorf("variable %q: shape %v needs %d bytes of initial values, got %d", spec.Name, spec.Shape, 4*n, len(spec.Init))
		}
		v := &denseVar{name: spec.Name, shape: spec.Shape, value: hugemem.Float32s(int(n))}
		wire.DecodeFloat32s(v.value, spec.Init)
		v.state = make([][]float32, rule.StateSlots())
		for i := range v.state {
			v.state[i] = hugemem.Float32s(int(n))
		}
		rule.InitState(v.state)
		if req.Sync {
			v.accum = hugemem.Float32s(int(n))
		}
		vars[spec.Name] = v
	}
	tables, err := newTables(req, rule)
	if err != nil {
		return nil, err
	}
	return &shardState{vars: vars, tables: tables, rule: rule, tracker: tracker, sync: req.Sync, r: req.ReplicasToAggregate, n: req.NumWorkers}, nil
}

// install makes st the shard's state. Call with mu held.
func (s *Server) install(st *shardState, req *pb.InitRequest) {
	s.vars, s.tables, s.rule, s.tracker = st.vars, st.tables, st.rule, st.tracker
	layout := proto.Clone(req).(*pb.InitRequest)
	for _, v := range layout.Vars {
		v.Init = nil // keep the layout, not the values
	}
	s.initReq = layout
	s.layout = layout.Vars
	s.tableLayout = req.Tables
	s.syncTimeout = time.Duration(req.SyncTimeoutMs) * time.Millisecond
	s.syncProceed = req.SyncProceed
	s.pendingSince = time.Time{}
	s.syncFailed = nil
	s.initialized = true
	s.advanced()
	// The request's initial values (as large as the model, and copied by
	// gRPC and protobuf on the way in) are garbage now: give their memory
	// back rather than leave it in the ps's resident set.
	debug.FreeOSMemory()
}

func sameLayout(have, want []*pb.VarSpec) error {
	if len(have) != len(want) {
		return fmt.Errorf("have %d variables, asked for %d", len(have), len(want))
	}
	for i := range have {
		if have[i].Name != want[i].Name || !slices.Equal(have[i].Shape, want[i].Shape) {
			return fmt.Errorf("variable %d is %s%v here, asked for %s%v", i, have[i].Name, have[i].Shape, want[i].Name, want[i].Shape)
		}
	}
	return nil
}

func sameTables(have, want []*pb.TableSpec) error {
	if len(have) != len(want) {
		return fmt.Errorf("have %d sparse tables, asked for %d", len(have), len(want))
	}
	for i := range have {
		if have[i].Name != want[i].Name || have[i].Dim != want[i].Dim {
			return fmt.Errorf("table %d is %s (dim %d) here, asked for %s (dim %d)", i, have[i].Name, have[i].Dim, want[i].Name, want[i].Dim)
		}
	}
	return nil
}

func optimConfig(c *pb.OptimizerConfig) optim.Config {
	if c == nil {
		return optim.Config{}
	}
	return optim.Config{
		Name: c.Name, LearningRate: c.LearningRate, Momentum: c.Momentum, Nesterov: c.Nesterov,
		InitialAccumulator: c.InitialAccumulator, Beta1: c.Beta1, Beta2: c.Beta2, Epsilon: c.Epsilon,
		FTRLBeta: c.FtrlBeta, L1: c.L1, L2: c.L2,
	}
}

// advanced wakes every pull waiting for the step. Call with mu held.
func (s *Server) advanced() {
	if s.stepWaited {
		close(s.stepCh)
		s.stepCh = make(chan struct{})
		s.stepWaited = false
	}
}

var errNotInitialized = errors.New("not initialised yet: waiting for the chief (worker 0) to call Init")

// Push applies or accumulates gradients.
func (s *Server) Push(_ context.Context, req *pb.PushRequest) (*pb.PushResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.push(req)
}

// push does the work of Push with mu held.
func (s *Server) push(req *pb.PushRequest) (*pb.PushResponse, error) {
	s.heard(req.Worker)
	if !s.initialized {
		return nil, status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, errNotInitialized)
	}
	grads, err := s.checkPush(req)
	var sparse []sparseGrad
	if err == nil {
		sparse, err = s.checkSparsePush(req)
	}
	if err != nil {
		return nil, s.rejectPush(req.Worker, req.Step, err)
	}
	if s.syncFailed != nil {
		return nil, status.Error(codes.DeadlineExceeded, s.syncFailed.Error())
	}
	if err := s.futureStep(req.Worker, req.Step); err != nil {
		return nil, err
	}
	verdict, err := s.applyPush(req.Worker, req.Step, grads, sparse)
	if err != nil {
		return nil, err
	}
	if verdict.Dropped() {
		return &pb.PushResponse{GlobalStep: s.tracker.Step(), Dropped: true, DropReason: verdict.String(), Incarnation: s.incarnation}, nil
	}
	return &pb.PushResponse{GlobalStep: s.tracker.Step(), Incarnation: s.incarnation}, nil
}

// futureStep refuses, as recoverable, a synchronous push for a step the
// shard has not reached: it was rolled back to a checkpoint, or another
// shard ran ahead; the worker pulls again and goes on. Call with mu held.
func (s *Server) futureStep(worker int32, step int64) error {
	if s.tracker.Config().Sync && step > s.tracker.Step() && worker >= 0 && int(worker) < s.cfg.NumWorkers {
		return status.Errorf(codes.FailedPrecondition, "ps %d is at step %d, the push is for step %d: pull again", s.cfg.Task, s.tracker.Step(), step)
	}
	return nil
}

// rejectPush counts and logs a malformed push. Call with mu held.
func (s *Server) rejectPush(worker int32, step int64, err error) error {
	s.rejected++
	s.cfg.Logf("rejected push from worker %d at step %d: %v (rejected pushes so far: %d)", worker, step, err, s.rejected)
	return status.Errorf(codes.InvalidArgument, "ps %d rejected the push: %v", s.cfg.Task, err)
}

// denseGrad is a checked gradient of one variable.
type denseGrad struct {
	v *denseVar
	g []float32
}

// applyPush asks the tracker about a checked push and applies, accumulates
// or drops it. Every path (gRPC, data path) goes through it. Call with mu
// held.
func (s *Server) applyPush(worker int32, step int64, grads []denseGrad, sparse []sparseGrad) (consistency.Verdict, error) {
	verdict, err := s.tracker.Push(int(worker), step)
	if err != nil {
		s.rejected++
		s.cfg.Logf("rejected push from worker %d: %v (rejected pushes so far: %d)", worker, err, s.rejected)
		return 0, status.Errorf(codes.InvalidArgument, "ps %d rejected the push: %v", s.cfg.Task, err)
	}
	switch verdict {
	case consistency.Apply:
		for _, g := range grads {
			s.update(g.v, g.g)
		}
		for _, g := range sparse {
			g.push(s.tracker.Step())
		}
		s.maybeEvict()
		s.advanced()
	case consistency.Accumulate, consistency.Complete:
		if s.pendingSince.IsZero() {
			s.pendingSince = time.Now()
		}
		for _, g := range grads {
			acc := g.v.accum
			for j, x := range g.g {
				acc[j] += x
			}
		}
		for _, g := range sparse {
			g.table.accumulate(g.keys, g.values)
		}
		if verdict == consistency.Complete {
			s.applyStep(s.tracker.Config().ReplicasToAggregate)
		}
	}
	return verdict, nil
}

// applyStep applies the average of a completed synchronous step's sum of
// count gradients. Call with mu held, after the tracker advanced.
func (s *Server) applyStep(count int) {
	scale := 1 / float32(count)
	for _, v := range s.vars {
		for j := range v.accum {
			v.accum[j] *= scale
		}
		s.update(v, v.accum)
		clear(v.accum)
	}
	for _, t := range s.tables {
		t.applyAccumulated(scale, s.tracker.Step())
	}
	s.pendingSince = time.Time{}
	s.maybeEvict()
	s.advanced()
}

// checkPush validates every gradient of req before any is used, so a bad
// push changes nothing. It returns the gradients as float32 slices.
func (s *Server) checkPush(req *pb.PushRequest) ([]denseGrad, error) {
	grads := make([]denseGrad, len(req.Grads))
	seen := make(map[string]bool, len(req.Grads))
	for i, g := range req.Grads {
		v, ok := s.vars[g.Name]
		if !ok {
			return nil, fmt.Errorf("unknown variable %q (this ps holds %d variables)", g.Name, len(s.vars))
		}
		if seen[g.Name] {
			return nil, fmt.Errorf("variable %q pushed twice in one request", g.Name)
		}
		seen[g.Name] = true
		if len(g.Data) != 4*len(v.value) {
			return nil, fmt.Errorf("variable %q: gradient has %d bytes, want %d (%d float32 of shape %v)", g.Name, len(g.Data), 4*len(v.value), len(v.value), v.shape)
		}
		f, err := wire.Float32s(g.Data)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", g.Name, err)
		}
		if j := wire.FirstNonFinite(f); j >= 0 {
			return nil, fmt.Errorf("variable %q: gradient element %d is %v", g.Name, j, f[j])
		}
		grads[i] = denseGrad{v: v, g: f}
	}
	if s.tracker.Config().Sync && len(req.Grads) != 0 && len(req.Grads) != len(s.vars) {
		return nil, fmt.Errorf("a synchronous push must carry all %d variables of this ps, got %d", len(s.vars), len(req.Grads))
	}
	return grads, nil
}

// Pull returns values once the shard's step reaches min_step.
func (s *Server) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pull(ctx, req)
}

// pull waits (releasing mu) until the step reaches req.MinStep, then reads.
// Call with mu held; it returns with mu held.
func (s *Server) pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	s.heard(req.Worker)
	if !s.initialized {
		return nil, status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, errNotInitialized)
	}
	if err := s.waitStep(ctx, req.Worker, req.MinStep); err != nil {
		return nil, err
	}
	resp := &pb.PullResponse{GlobalStep: s.tracker.Step(), Incarnation: s.incarnation}
	add := func(v *denseVar) {
		// Copy: the value changes after mu is released, before gRPC marshals.
		data := make([]byte, 4*len(v.value))
		copy(data, wire.Float32Bytes(v.value))
		resp.Vars = append(resp.Vars, &pb.DenseTensor{Name: v.name, Data: data})
	}
	switch {
	case len(req.Names) > 0:
		for _, name := range req.Names {
			v, ok := s.vars[name]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "ps %d: unknown variable %q", s.cfg.Task, name)
			}
			add(v)
		}
	case !req.NoDense:
		for _, spec := range s.layout {
			add(s.vars[spec.Name])
		}
	}
	for _, r := range req.Sparse {
		rows, err := s.pullSparse(r)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ps %d: %v", s.cfg.Task, err)
		}
		resp.Sparse = append(resp.Sparse, rows)
	}
	return resp, nil
}

// waitStep blocks until the step reaches min, logging every WaitLogEvery
// what it waits for. In synchronous mode it also enforces the step timeout:
// a step that has waited syncTimeout for missing gradients completes with
// those that came (syncProceed) or fails the job, naming the missing
// workers. A restore while waiting aborts the wait. Call with mu held; mu is
// released while waiting.
func (s *Server) waitStep(ctx context.Context, worker int32, min int64) error {
	start := time.Now()
	epoch := s.epoch
	lastLog := start
	var tick *time.Ticker
	for !s.tracker.Ready(min) {
		if s.syncFailed != nil {
			return status.Error(codes.DeadlineExceeded, s.syncFailed.Error())
		}
		if tick == nil {
			every := s.cfg.WaitLogEvery
			if s.syncTimeout > 0 {
				every = max(min64dur(every, s.syncTimeout/4), 10*time.Millisecond)
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
		case <-tick.C:
			s.mu.Lock()
			s.checkSyncTimeout()
			if time.Since(lastLog) >= s.cfg.WaitLogEvery {
				lastLog = time.Now()
				have, want, missing := s.tracker.Waiting()
				s.cfg.Logf("worker %d has waited %s for step %d: shard at step %d with %d of %d gradients (no gradient yet from workers %v)",
					worker, time.Since(start).Round(time.Second), min, s.tracker.Step(), have, want, missing)
			}
		case <-ctx.Done():
			s.mu.Lock()
			return status.FromContextError(ctx.Err()).Err()
		}
		if s.epoch != epoch {
			return status.Errorf(codes.Aborted, "ps %d was restored to step %d while this pull waited for step %d: pull again", s.cfg.Task, s.tracker.Step(), min)
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

// checkSyncTimeout enforces --sync_timeout on the current step. Call with
// mu held.
func (s *Server) checkSyncTimeout() {
	if s.syncTimeout <= 0 || s.pendingSince.IsZero() || s.syncFailed != nil || time.Since(s.pendingSince) < s.syncTimeout {
		return
	}
	step := s.tracker.Step()
	have, want, missing := s.tracker.Waiting()
	if s.syncProceed {
		n := s.tracker.ForceComplete()
		s.cfg.Logf("step %d: --sync_timeout=%s passed with %d of %d gradients (none from workers %v); completing the step with those (--sync_on_timeout=proceed)", step, s.syncTimeout, have, want, missing)
		s.applyStep(n)
		return
	}
	s.syncFailed = fmt.Errorf("step %d: no gradient from workers %v within --sync_timeout=%s (%d of %d arrived); failing the job (--sync_on_timeout=fail; use proceed, backup workers, or restart the missing worker)", step, missing, s.syncTimeout, have, want)
	s.cfg.Logf("%v", s.syncFailed)
	s.advanced() // wake every waiting pull so it fails too
}

// PushPull pushes, then pulls, in one round trip.
func (s *Server) PushPull(ctx context.Context, req *pb.PushPullRequest) (*pb.PullResponse, error) {
	if req.Push == nil || req.Pull == nil {
		return nil, status.Error(codes.InvalidArgument, "PushPull needs both push and pull")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pr, err := s.push(req.Push)
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

// Status reports the shard's state.
func (s *Server) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &pb.StatusResponse{
		Incarnation:    s.incarnation,
		RestoredStep:   s.restoredStep,
		Task:           int32(s.cfg.Task),
		Initialized:    s.initialized,
		RejectedPushes: s.rejected,
		WorkersDone:    int32(len(s.done)),
		NumWorkers:     int32(s.cfg.NumWorkers),
	}
	if s.initialized {
		st := s.tracker.Stats()
		resp.GlobalStep = s.tracker.Step()
		resp.StaleDropped = st.StaleDropped + st.DuplicateDrops
		resp.AppliedPushes = st.Applied
		resp.Mode = "async"
		if s.tracker.Config().Sync {
			resp.Mode = "sync"
		}
		for _, spec := range s.tableLayout {
			resp.Tables = append(resp.Tables, s.tables[spec.Name].status())
		}
	}
	return resp, nil
}

// Done records that a worker has finished.
func (s *Server) Done(_ context.Context, req *pb.DoneRequest) (*pb.DoneResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Worker < 0 || int(req.Worker) >= s.cfg.NumWorkers {
		return nil, status.Errorf(codes.InvalidArgument, "worker %d out of range 0..%d", req.Worker, s.cfg.NumWorkers-1)
	}
	s.heard(req.Worker)
	if !s.done[req.Worker] {
		s.done[req.Worker] = true
		s.cfg.Logf("worker %d finished (%d of %d done)", req.Worker, len(s.done), s.cfg.NumWorkers)
	}
	if len(s.done) == s.cfg.NumWorkers && !s.closed {
		s.closed = true
		close(s.allDone)
	}
	return &pb.DoneResponse{}, nil
}
