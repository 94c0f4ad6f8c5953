package shard

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Config is what a shard knows of its place in the cluster.
type Config struct {
	Task       int // this ps's index
	NumPS      int // ps tasks in the cluster (sparse keys are placed by it); 1 if 0
	NumWorkers int // workers in the cluster
	// Logf receives the log lines; nil discards them.
	Logf func(format string, args ...any)
	// Update applies one dense gradient with a rule; nil is the rule's own
	// Update. The ps passes optim.ApplyParallel's spread over its cores.
	Update func(r optim.Rule, param, grad []float32, state [][]float32, step int64)
	// Parallel runs the sparse tables' large jobs (a checkpoint's copy and
	// sort, a restore's import) on several cores; nil is parallel.Serial.
	// The package starts no goroutine: the ps passes one that does.
	Parallel parallel.Runner
	// Incarnation returns a new incarnation id (random if nil); tests pass
	// a counter to make runs repeatable.
	Incarnation func() uint64
	// Aggregated, if set, receives each completed synchronous step's
	// averaged dense gradients, one per variable in layout order, and its
	// averaged row gradients, one per table in layout order, just
	// before the rule applies them; step is the step they were computed
	// at. The slices are valid only during the call. A backup copy applies
	// them with ApplyAggregate (replication after aggregation).
	Aggregated func(step int64, grads [][]float32, rows []RowGrads)
	// PeekPulls makes PullRows change nothing (sparse.Table.Peek): a copy
	// of a replicated shard applies the changes a pull makes to its tables
	// (admission counts, new rows) from the shard's log (TouchRows) instead.
	PeekPulls bool
	// MaxTableKeys, if positive, caps the keys (rows) each sparse table of
	// this shard holds: a push that would add rows past it is refused
	// whole (Invalid, naming the table and the cap), and a pull of a key
	// past it reads the key's initial value without storing a row.
	MaxTableKeys int
	// Tiers, if set, gives every table a second tier (Tiers).
	Tiers Tiers
}

// RowGrads is a synchronous step's averaged gradient of one sparse table:
// row i's at Values[i*dim:(i+1)*dim], in the order the rows are applied.
type RowGrads struct {
	Keys   []uint64
	Values []float32
}

// VarSpec is a dense variable of a shard: its name there (a variable split
// across ps has a part name, "w/part_1") and the shape of the part held.
type VarSpec struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	// Optimizer is the variable's own update rule; nil: the layout's.
	Optimizer *optim.Config `json:"optimizer,omitempty"`
}

// TableSpec is a sparse table: the checkpoint manifest's record of one.
type TableSpec = ckptformat.TableSpec

// Layout is everything the chief's Init (or a checkpoint) fixes about a
// shard except the values: its variables and tables, the optimizer and the
// mode.
type Layout struct {
	Vars      []VarSpec
	Tables    []TableSpec
	Optimizer optim.Config

	Sync                bool
	ReplicasToAggregate int   // sync: gradients averaged per step
	NumWorkers          int   // as the chief counts them; must match the shard's
	MaxStaleness        int64 // async: drop pushes older than this; 0 = no bound
	SyncTimeout         time.Duration
	SyncProceed         bool  // after SyncTimeout complete with what came (else fail)
	SplitBytes          int64 // the placement threshold, recorded in checkpoints
	GlobalStep          int64 // the step to start at
	// GoalStep is the job's last step (--train_steps; 0: none): pushes
	// past it are dropped (consistency.Config.Goal). A repeated Init sets
	// it again; a checkpoint records it.
	GoalStep int64
	// RateChanges are the chief's changes of the job's learning rate and
	// schedule while training (ChangeRate), as a checkpoint records them.
	// Variables and tables with their own rule keep their own schedule.
	RateChanges []optim.RateChange
}

// MaxValues bounds the values of one variable (2^31-1 float32, 8 GiB): a
// shape whose product is larger, or overflows, is refused, never allocated.
const MaxValues = math.MaxInt32

// Var is one dense variable of the shard.
type Var struct {
	name     string
	shape    []int64
	value    []float32 // lent to replies in flight: see LeaseValues before writing it
	state    [][]float32
	accum    []float32 // sync: sum of the current step's gradients
	updates  int64     // updates applied, for Adam's bias correction
	cutAt    int64     // updates at the last incremental cut (ckpt_incr.go)
	lent     lentBufs
	rule     optim.Rule       // the layout's rule or the variable's own
	sched    *optim.Scheduled // rule under its schedule (shared with the layout's)
	ver      []uint64         // each block's version (dense_ver.go); nil until stamped
	bnd      varBound         // ranges holding value and state (bound.go)
	next     varBound         // what bnd becomes after the update checkResult bounded
	bndRetry int64            // measure bnd no sooner than at this update count
}

// Name is the variable's name on this shard.
func (v *Var) Name() string { return v.name }

// Len is the number of float32 values.
func (v *Var) Len() int { return len(v.value) }

// State is what Init or a restore builds before it becomes a shard's: its
// variables, tables, rule and tracker. Build it outside any lock (it may
// read files or allocate gigabytes), then Install it.
type State struct {
	layout   Layout
	vars     map[string]*Var
	order    []*Var // in layout order, as replies list them
	tables   map[string]*table
	tableOrd []*table
	rule     optim.Rule
	sched    *optim.Scheduled // rule under the job's schedule and rate changes
	tracker  *consistency.Tracker
	restored int64 // the checkpoint step it came from, or -1
	lastCut  int64 // the checkpoint the last incremental cut was for, or -1 (ckpt_incr.go)
}

// Describe is a one-line account of the state for the log.
func (st *State) Describe() string {
	mode := "async"
	if st.layout.Sync {
		mode = fmt.Sprintf("sync, %d of %d workers per step", st.layout.ReplicasToAggregate, st.layout.NumWorkers)
	}
	return fmt.Sprintf("%d variables, %d sparse tables, optimizer %s, %s, global step %d", len(st.vars), len(st.tables), st.rule.Name(), mode, st.tracker.Step())
}

// Shard is one ps's state machine. It is not safe for concurrent use: the
// caller serialises every call (the ps holds one mutex around it).
type Shard struct {
	cfg Config

	st          *State // nil until initialised
	incarnation uint64 // new at start and at each restore; sent in every answer
	epoch       int64  // counts installs: a pull waiting across one is aborted
	version     uint64 // counts changes a waiting pull cares about
	dver        uint64 // the dense values' version (dense_ver.go)

	pendingSince time.Time // sync: when the current step got its first gradient
	syncFailed   error     // sync: set once a step timed out with fail
	failRestart  bool      // syncFailed is a damaged tier: the ps restarts and restores (tier.go)
	rejected     int64     // pushes refused as malformed
	done         map[int]bool
	scratch      [][]float32 // state slot views of a streamed update
	trial        trial       // scratch of checkResult
	trialRule    trialRule   // the rule checkResult runs through Config.Update
	aggBuf       [][]float32 // the averaged gradients handed to Config.Aggregated
}

// New returns an uninitialised shard; Init or Install gives it state.
func New(cfg Config) *Shard {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.NumPS <= 0 {
		cfg.NumPS = 1
	}
	cfg.MaxTableKeys = min(max(cfg.MaxTableKeys, 0), sparse.MaxRowsLimit)
	if cfg.Update == nil {
		cfg.Update = func(r optim.Rule, param, grad []float32, state [][]float32, step int64) {
			r.Update(param, grad, state, step)
		}
	}
	if cfg.Incarnation == nil {
		cfg.Incarnation = randomIncarnation
	}
	return &Shard{cfg: cfg, incarnation: cfg.Incarnation(), done: make(map[int]bool)}
}

func randomIncarnation() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: it crashes the program instead
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Config returns the shard's configuration.
func (s *Shard) Config() Config { return s.cfg }

// Initialized reports whether the shard has state.
func (s *Shard) Initialized() bool { return s.st != nil }

// Layout returns the shard's layout; zero before Init.
func (s *Shard) Layout() Layout {
	if s.st == nil {
		return Layout{}
	}
	l := s.st.layout
	l.RateChanges = slices.Clone(l.RateChanges)
	return l
}

// Step is the global step; 0 before Init.
func (s *Shard) Step() int64 {
	if s.st == nil {
		return 0
	}
	return s.st.tracker.Step()
}

// GoalStep is the job's goal as the chief's Init or the restored
// checkpoint set it; 0 when none is known.
func (s *Shard) GoalStep() int64 {
	if s.st == nil {
		return 0
	}
	return s.st.tracker.Config().Goal
}

// Incarnation is the id of this life of the shard: new at start and at
// every Install of a restored state.
func (s *Shard) Incarnation() uint64 { return s.incarnation }

// Epoch counts installs; a pull that waited across one must start again.
func (s *Shard) Epoch() int64 { return s.epoch }

// Version changes whenever something a waiting pull waits for changes: the
// step advanced, a state was installed, a step failed.
func (s *Shard) Version() uint64 { return s.version }

// Ready reports whether a pull needing step min may be answered.
func (s *Shard) Ready(min int64) bool { return s.st != nil && s.st.tracker.Ready(min) }

// Failed is the error of a synchronous step that timed out with
// SyncProceed off, or nil.
func (s *Shard) Failed() error {
	if s.syncFailed == nil {
		return nil
	}
	if s.failRestart {
		// Not the job's failure: the workers wait for the ps's restart.
		return &Error{Kind: NotReady, Msg: s.syncFailed.Error()}
	}
	return &Error{Kind: Failed, Msg: s.syncFailed.Error()}
}

// Vars returns the dense variables in layout order.
func (s *Shard) Vars() []*Var {
	if s.st == nil {
		return nil
	}
	return s.st.order
}

// Var returns the variable of that name, or nil.
func (s *Shard) Var(name string) *Var {
	if s.st == nil {
		return nil
	}
	return s.st.vars[name]
}

// Sync reports synchronous mode.
func (s *Shard) Sync() bool { return s.st != nil && s.st.layout.Sync }

// Waiting describes what the current synchronous step waits for.
func (s *Shard) Waiting() (have, want int, missing []int) {
	if s.st == nil {
		return 0, 0, nil
	}
	return s.st.tracker.Waiting()
}

// Init builds the shard from the chief's layout and initial values (one
// slice per layout variable, in order) and installs it. A repeated Init
// with the same layout (a restarted chief) changes nothing and reports
// already true.
func (s *Shard) Init(l Layout, values [][]float32) (already bool, err error) {
	if s.st != nil {
		if err := sameLayout(s.st.layout, l); err != nil {
			return false, errorf(Conflict, "ps %d is already initialised with a different layout: %v", s.cfg.Task, err)
		}
		if err := s.again(l, values); err != nil {
			return false, err
		}
		return true, nil
	}
	if l.NumWorkers != s.cfg.NumWorkers {
		return false, errorf(Invalid, "chief says %d workers, ps %d was started with %d in --worker_hosts", l.NumWorkers, s.cfg.Task, s.cfg.NumWorkers)
	}
	// Every variable's values must be there before anything is allocated:
	// a small request must not make the ps allocate a large shape.
	if len(values) != len(l.Vars) {
		return false, errorf(Invalid, "ps %d: %d variables with initial values for %d in the layout", s.cfg.Task, len(values), len(l.Vars))
	}
	for i, spec := range l.Vars {
		n, err := NumValues(spec.Shape)
		if err != nil {
			return false, errorf(Invalid, "variable %q: %w", spec.Name, err)
		}
		if n != len(values[i]) {
			return false, errorf(Invalid, "variable %q: shape %v needs %d bytes of initial values, got %d", spec.Name, spec.Shape, 4*n, 4*len(values[i]))
		}
		// A value not finite would stay (no update can mend it) and reach
		// every checkpoint.
		if j := format.FirstNonFinite(values[i]); j >= 0 {
			return false, errorf(Invalid, "variable %q: initial value %d is %v: the values of a model must be finite", spec.Name, j, values[i][j])
		}
	}
	st, err := Build(l, func(i int, dst []float32) error {
		if i >= len(values) {
			return fmt.Errorf("no initial values")
		}
		if len(values[i]) != len(dst) {
			return fmt.Errorf("shape %v needs %d bytes of initial values, got %d", l.Vars[i].Shape, 4*len(dst), 4*len(values[i]))
		}
		copy(dst, values[i])
		return nil
	})
	if err != nil {
		return false, &Error{Kind: Invalid, Msg: err.Error(), Err: err}
	}
	s.Install(st)
	return false, nil
}

// setParallel makes run the Runner of the state's sparse tables.
func (st *State) setParallel(run parallel.Runner) {
	for _, t := range st.tableOrd {
		t.t.SetParallel(run)
	}
}

// NumValues checks a shape and returns its number of values: every
// dimension > 0 and the product at most MaxValues (no overflow).
func NumValues(shape []int64) (int, error) {
	n := uint64(1)
	for _, d := range shape {
		if d <= 0 {
			return 0, fmt.Errorf("shape %v has a dimension <= 0", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > MaxValues {
			return 0, fmt.Errorf("shape %v has more than %d values", shape, MaxValues)
		}
		n = lo
	}
	return int(n), nil
}

// Build makes a state from a layout, checking everything; fill writes the
// initial values of variable i into dst (len(dst) values) or refuses them.
func Build(l Layout, fill func(i int, dst []float32) error) (*State, error) {
	sched, err := optim.NewScheduled(l.Optimizer, l.RateChanges)
	if err != nil {
		return nil, err
	}
	rule := sched.Rule()
	tracker, err := consistency.New(consistency.Config{
		Sync:                l.Sync,
		ReplicasToAggregate: l.ReplicasToAggregate,
		NumWorkers:          l.NumWorkers,
		MaxStaleness:        l.MaxStaleness,
		Goal:                max(l.GoalStep, 0),
	}, l.GlobalStep)
	if err != nil {
		return nil, err
	}
	st := &State{layout: l, vars: make(map[string]*Var, len(l.Vars)), rule: rule, sched: sched, tracker: tracker, restored: -1, lastCut: -1}
	// Check every shape before allocating any, so that a bad request
	// costs nothing.
	sizes := make([]int, len(l.Vars))
	rules := make([]*optim.Scheduled, len(l.Vars))
	for i, spec := range l.Vars {
		if len(spec.Name) == 0 || len(spec.Name) > format.MaxName {
			// The data path carries names of at most format.MaxName bytes:
			// a longer one would be initialised and then never pushed.
			return nil, fmt.Errorf("variable %.40q has a %d-byte name (want 1 to %d)", spec.Name, len(spec.Name), format.MaxName)
		}
		n, err := NumValues(spec.Shape)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", spec.Name, err)
		}
		if rules[i], err = schedOf(sched, spec.Optimizer); err != nil {
			return nil, fmt.Errorf("variable %q: %w", spec.Name, err)
		}
		if _, dup := st.vars[spec.Name]; dup {
			return nil, fmt.Errorf("variable %q given twice", spec.Name)
		}
		st.vars[spec.Name] = nil
		sizes[i] = n
	}
	for i, spec := range l.Vars {
		n := sizes[i]
		v := &Var{name: spec.Name, shape: slices.Clone(spec.Shape), value: hugemem.Float32s(n), rule: rules[i].Rule(), sched: rules[i]}
		if err := fill(i, v.value); err != nil {
			return nil, fmt.Errorf("variable %q: %w", spec.Name, err)
		}
		v.state = make([][]float32, v.rule.StateSlots())
		for j := range v.state {
			v.state[j] = hugemem.Float32s(n)
		}
		v.rule.InitState(v.state)
		if l.Sync {
			v.accum = hugemem.Float32s(n)
		}
		st.vars[spec.Name] = v
		st.order = append(st.order, v)
	}
	if st.tables, st.tableOrd, err = newTables(l, sched); err != nil {
		return nil, err
	}
	st.layout.Vars = slices.Clone(l.Vars)
	st.layout.Tables = slices.Clone(l.Tables)
	st.layout.RateChanges = slices.Clone(l.RateChanges)
	return st, nil
}

// Install makes st the shard's state. A state built from a checkpoint
// (Restore) gives the shard a new incarnation and aborts waiting pulls.
func (s *Shard) Install(st *State) {
	st.setParallel(s.cfg.Parallel)
	if s.cfg.Tiers == nil {
		// A tier keeps rows past memory; the cap counts rows in memory
		// (the front ends refuse the two together).
		for _, t := range st.tableOrd {
			_ = t.t.SetMaxRows(s.cfg.MaxTableKeys) // checked by New
		}
	}
	s.attachTiers(st)
	s.st = st
	s.pendingSince = time.Time{}
	s.syncFailed, s.failRestart = nil, false
	if st.restored >= 0 {
		s.incarnation = s.cfg.Incarnation()
		s.epoch++
	}
	s.version++
	s.stampAll()
}

// RestoredStep is the checkpoint step this incarnation restored, or -1.
func (s *Shard) RestoredStep() int64 {
	if s.st == nil {
		return -1
	}
	return s.st.restored
}

func sameLayout(have, want Layout) error {
	if len(have.Vars) != len(want.Vars) {
		return fmt.Errorf("have %d variables, asked for %d", len(have.Vars), len(want.Vars))
	}
	for i := range have.Vars {
		h, w := have.Vars[i], want.Vars[i]
		if h.Name != w.Name || !slices.Equal(h.Shape, w.Shape) {
			return fmt.Errorf("variable %d is %s%v here, asked for %s%v", i, h.Name, h.Shape, w.Name, w.Shape)
		}
		if !sameRule(h.Optimizer, w.Optimizer) {
			return fmt.Errorf("variable %s has update rule %s here, asked for %s", h.Name, ruleString(h.Optimizer), ruleString(w.Optimizer))
		}
	}
	if len(have.Tables) != len(want.Tables) {
		return fmt.Errorf("have %d sparse tables, asked for %d", len(have.Tables), len(want.Tables))
	}
	for i := range have.Tables {
		h, w := have.Tables[i], want.Tables[i]
		if h.Name != w.Name || h.Dim != w.Dim {
			return fmt.Errorf("table %d is %s (dim %d) here, asked for %s (dim %d)", i, h.Name, h.Dim, w.Name, w.Dim)
		}
		if !sameRule(h.Optimizer, w.Optimizer) {
			return fmt.Errorf("table %s has update rule %s here, asked for %s", h.Name, ruleString(h.Optimizer), ruleString(w.Optimizer))
		}
	}
	return nil
}

// schedOf is the scheduled rule of a variable or table: its own where it
// has one (under its own schedule, without the job's rate changes), else
// the layout's.
func schedOf(layout *optim.Scheduled, own *optim.Config) (*optim.Scheduled, error) {
	if own == nil {
		return layout, nil
	}
	return optim.NewScheduled(*own, nil)
}

// ruleOf is the rule of a variable or table: its own where it has one,
// else the layout's.
func ruleOf(layout optim.Rule, own *optim.Config) (optim.Rule, error) {
	if own == nil {
		return layout, nil
	}
	return optim.New(*own)
}

// sameRule reports whether two per-variable (or per-table) rules are the
// same: both the job's, or equal configurations.
func sameRule(a, b *optim.Config) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

func ruleString(c *optim.Config) string {
	if c == nil {
		return "(the job's)"
	}
	if p := c.LearningRatePower; p != nil {
		d := *c
		d.LearningRatePower = nil
		return fmt.Sprintf("%+v with learning_rate_power %v", d, *p)
	}
	return fmt.Sprintf("%+v", *c)
}

// Status is what a Status request reports.
type Status struct {
	Task           int
	Initialized    bool
	GlobalStep     int64
	StaleDropped   int64 // stale and duplicate drops
	AppliedPushes  int64
	RejectedPushes int64
	WorkersDone    int
	NumWorkers     int
	Mode           string // "async" or "sync"; "" before Init
	Tables         []TableStatus
	Incarnation    uint64
	RestoredStep   int64
	LearningRate   float64 // the job's rule's rate for the next update
}

// TableStatus is one table's line of a Status.
type TableStatus struct {
	Name                string
	Rows                int64
	Bytes               int64
	Admitted            int64
	Evicted             int64
	RejectedByAdmission int64
	// With a second tier (Tiers): of Rows, those in the tier, and the keys
	// looked for there and found.
	TierRows, TierLookups, TierHits int64
}

// Status reports the shard's state.
func (s *Shard) Status() Status {
	out := Status{
		Task: s.cfg.Task, Initialized: s.st != nil, RejectedPushes: s.rejected,
		WorkersDone: len(s.done), NumWorkers: s.cfg.NumWorkers,
		Incarnation: s.incarnation, RestoredStep: s.RestoredStep(),
	}
	if s.st == nil {
		return out
	}
	ts := s.st.tracker.Stats()
	out.GlobalStep = s.st.tracker.Step()
	out.LearningRate = s.Rate()
	out.StaleDropped = ts.StaleDropped + ts.DuplicateDrops
	out.AppliedPushes = ts.Applied
	out.Mode = "async"
	if s.st.layout.Sync {
		out.Mode = "sync"
	}
	for _, t := range s.st.tableOrd {
		out.Tables = append(out.Tables, t.status())
	}
	return out
}

// Done records that a worker has finished and reports whether every worker
// now has.
func (s *Shard) Done(worker int) (all bool, err error) {
	if worker < 0 || worker >= s.cfg.NumWorkers {
		return false, errorf(Invalid, "worker %d out of range 0..%d", worker, s.cfg.NumWorkers-1)
	}
	if !s.done[worker] {
		s.done[worker] = true
		s.cfg.Logf("worker %d finished (%d of %d done)", worker, len(s.done), s.cfg.NumWorkers)
	}
	return len(s.done) == s.cfg.NumWorkers, nil
}

// DoneWorkers returns the workers that have called Done, ascending.
func (s *Shard) DoneWorkers() []int {
	out := make([]int, 0, len(s.done))
	for w := range s.done {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}
