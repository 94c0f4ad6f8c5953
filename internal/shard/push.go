package shard

import (
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Unchecked in a gradient's Bad field asks Check to look for values that
// are not finite itself; a decoder that already looked (the data path does
// while the bytes arrive) gives the index of the first one, or -1.
const Unchecked = -2

// Push is one worker's push: gradients computed against global step Step.
// The gRPC service and the data path both decode into it. A Push may be
// reused for the next request once Apply returned (the data path keeps one
// per connection); Check fills its unexported fields.
type Push struct {
	Worker int
	Step   int64
	Dense  []DenseGrad
	Sparse []SparseGrad

	vars []*Var   // Dense[i]'s variable, once checked
	tabs []*table // Sparse[i]'s table, once checked
	ok   bool     // checked by this shard's current state
	st   *State
}

// DenseGrad is the gradient of one dense variable.
type DenseGrad struct {
	Name   []byte
	Values []float32
	Bad    int // index of the first value not finite, -1, or Unchecked
	// MaxAbs, if above 0, is the largest |value| of Values, found by the
	// caller as it checked them (the data path's reader); 0: not known.
	MaxAbs float32
}

// SparseGrad is the gradient of some rows of one table: row i's gradient
// is Values[i*dim:(i+1)*dim].
type SparseGrad struct {
	Table []byte
	// Keys are the rows' keys; or Set, if not nil, holds them with the rows
	// they had when last used (a data-path key cache slot), which finds the
	// rows faster with the same result.
	Keys []uint64
	Set  *sparse.KeySet
	// Owned says the caller already checked that this ps owns every key
	// (a kept key set is checked once).
	Owned  bool
	Values []float32
	Bad    int     // index of the first value not finite, -1, or Unchecked
	MaxAbs float32 // as DenseGrad's
}

func (g *SparseGrad) keys() []uint64 {
	if g.Set != nil {
		return g.Set.Keys()
	}
	return g.Keys
}

// Check validates every gradient of p before any is used, so that a bad
// push changes nothing: known variables and tables, each variable once,
// right lengths, finite values, keys this ps owns, and in synchronous mode
// every variable of the shard or none. An Invalid error is counted and
// logged.
func (s *Shard) Check(p *Push) error {
	p.ok = false
	if s.st == nil {
		return &Error{Kind: NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, ErrNotInitialized), Err: ErrNotInitialized}
	}
	if err := s.check(p); err != nil {
		return s.reject(p.Worker, p.Step, err)
	}
	for i, t := range p.tabs {
		if err := t.fetch(p.Sparse[i].keys()); err != nil {
			return s.tierFailed(t, err)
		}
	}
	p.ok, p.st = true, s.st
	return nil
}

func (s *Shard) check(p *Push) error {
	st := s.st
	p.vars, p.tabs = p.vars[:0], p.tabs[:0]
	for i := range p.Dense {
		g := &p.Dense[i]
		v, ok := st.vars[string(g.Name)]
		if !ok {
			return fmt.Errorf("unknown variable %q (this ps holds %d variables)", g.Name, len(st.vars))
		}
		for _, seen := range p.vars {
			if seen == v {
				return fmt.Errorf("variable %q pushed twice in one request", g.Name)
			}
		}
		if len(g.Values) != len(v.value) {
			return fmt.Errorf("variable %q: gradient has %d bytes, want %d (%d float32 of shape %v)", g.Name, 4*len(g.Values), 4*len(v.value), len(v.value), v.shape)
		}
		bad := g.Bad
		if bad == Unchecked {
			bad = format.FirstNonFinite(g.Values)
		}
		if bad >= 0 {
			return fmt.Errorf("variable %q: gradient element %d is %v", g.Name, bad, g.Values[bad])
		}
		p.vars = append(p.vars, v)
	}
	if st.layout.Sync && len(p.Dense) != 0 && len(p.Dense) != len(st.vars) {
		return fmt.Errorf("a synchronous push must carry all %d variables of this ps, got %d", len(st.vars), len(p.Dense))
	}
	for i := range p.Sparse {
		g := &p.Sparse[i]
		t, ok := st.tables[string(g.Table)]
		if !ok {
			return fmt.Errorf("unknown table %q (this ps holds %d tables)", g.Table, len(st.tables))
		}
		keys := g.keys()
		if !g.Owned {
			if err := s.CheckOwned(g.Table, keys); err != nil {
				return err
			}
		}
		dim := t.t.Dim()
		if len(g.Values) != dim*len(keys) {
			return fmt.Errorf("table %q: %d keys of dim %d need %d bytes of gradients, got %d", g.Table, len(keys), dim, 4*dim*len(keys), 4*len(g.Values))
		}
		bad := g.Bad
		if bad == Unchecked {
			bad = format.FirstNonFinite(g.Values)
		}
		if bad >= 0 {
			return fmt.Errorf("table %q: gradient of key %d element %d is %v", g.Table, keys[bad/dim], bad%dim, g.Values[bad])
		}
		if c := s.cfg.MaxTableKeys; c > 0 && t.tier == nil {
			if n, add := t.t.Len(), t.t.CountMissing(keys); n+add > c {
				return fmt.Errorf("table %q holds %d keys and the push adds %d: over this ps's cap of %d keys a table (--max_table_keys)", g.Table, n, add, c)
			}
		}
		p.tabs = append(p.tabs, t)
	}
	return nil
}

// CheckOwned checks, with several ps, that this ps owns every key.
func (s *Shard) CheckOwned(table []byte, keys []uint64) error {
	if s.cfg.NumPS <= 1 {
		return nil
	}
	for _, k := range keys {
		if ps := placement.KeyShard(k, s.cfg.NumPS); ps != s.cfg.Task {
			return fmt.Errorf("table %q: key %d belongs to ps %d, not ps %d", table, k, ps, s.cfg.Task)
		}
	}
	return nil
}

// Reject counts and logs a push that a front end could not even decode
// (err says why), as Check does a malformed one, and returns its Invalid
// error.
func (s *Shard) Reject(worker int, step int64, err error) error { return s.reject(worker, step, err) }

// reject counts and logs a malformed push.
func (s *Shard) reject(worker int, step int64, err error) error {
	s.rejected++
	s.cfg.Logf("rejected push from worker %d at step %d: %v (rejected pushes so far: %d)", worker, step, err, s.rejected)
	return &Error{Kind: Invalid, Msg: fmt.Sprintf("ps %d rejected the push: %v", s.cfg.Task, err), Err: err}
}

// Result is what became of an applied push.
type Result struct {
	Verdict consistency.Verdict
	Step    int64 // the global step after the push
}

// Dropped reports a stale or duplicate push, counted and not applied.
func (r Result) Dropped() bool { return r.Verdict.Dropped() }

// Stream lets the caller of Apply overlap an asynchronous dense update
// with its reply: the values are updated Chunk at a time, and the hooks run
// between the chunks. Only an Apply verdict streams; a dropped push calls
// no hook.
type Stream struct {
	Chunk int // values updated at a time (> 0)
	// Begin runs once the verdict is Apply, after every pushed variable has
	// counted the update and been made writable (LeaseValues now lends the
	// buffer the update writes), before any value changes.
	Begin func(step int64)
	// Var runs before variable i of the push is updated.
	Var func(i int, v *Var)
	// Updated runs after values [lo, hi) of v are updated.
	Updated func(v *Var, lo, hi int)
}

// Apply asks the tracker about a checked push and applies, accumulates or
// drops it, at time now (when a synchronous step started waiting counts
// towards SyncTimeout). stream, if not nil, streams the dense update of an
// Apply verdict (the push must be asynchronous and dense only).
func (s *Shard) Apply(p *Push, now time.Time, stream *Stream) (Result, error) {
	if s.st == nil {
		return Result{}, &Error{Kind: NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, ErrNotInitialized), Err: ErrNotInitialized}
	}
	if !p.ok || p.st != s.st {
		return Result{}, fmt.Errorf("shard: Apply of a push not checked against this state")
	}
	p.ok = false
	if s.syncFailed != nil {
		return Result{}, s.Failed()
	}
	st := s.st
	if st.layout.Sync && p.Step > st.tracker.Step() && p.Worker >= 0 && p.Worker < s.cfg.NumWorkers {
		return Result{}, errorf(Behind, "ps %d is at step %d, the push is for step %d: pull again", s.cfg.Task, st.tracker.Step(), p.Step)
	}
	if !st.layout.Sync {
		// An asynchronous push not dropped as stale is applied at once:
		// try it first, so that one whose result is not finite changes
		// nothing. Ranges kept for a push not applied are dropped.
		defer dropPending(p.tabs)
		for i, v := range p.vars {
			if err := s.checkResult(v, p.Dense[i].Values, p.Dense[i].MaxAbs, v.updates+1, st.tracker.Step()); err != nil {
				return Result{}, s.refuseResult(p.Worker, p.Step, err)
			}
		}
		for i, t := range p.tabs { // Check brought the rows back from a tier
			if err := t.checkPush(p.Sparse[i].keys(), p.Sparse[i].Set, p.Sparse[i].Values, p.Sparse[i].MaxAbs, st.tracker.Step()); err != nil {
				return Result{}, s.refuseResult(p.Worker, p.Step, fmt.Errorf("table %q: %w; refused whole, nothing changed", t.name, err))
			}
		}
	}
	verdict, err := st.tracker.Push(p.Worker, p.Step)
	if err != nil {
		s.rejected++
		s.cfg.Logf("rejected push from worker %d: %v (rejected pushes so far: %d)", p.Worker, err, s.rejected)
		return Result{}, &Error{Kind: Invalid, Msg: fmt.Sprintf("ps %d rejected the push: %v", s.cfg.Task, err), Err: err}
	}
	switch verdict {
	case consistency.Apply:
		if stream != nil {
			s.stream(p, stream)
		} else {
			for i, v := range p.vars {
				s.update(v, p.Dense[i].Values, nil)
			}
		}
		for i, t := range p.tabs {
			if err := t.push(p.Sparse[i].keys(), p.Sparse[i].Set, p.Sparse[i].Values, st.tracker.Step()); err != nil {
				return Result{}, s.tierFailed(t, err)
			}
		}
		s.maybeEvict()
		s.version++
	case consistency.Accumulate, consistency.Complete:
		if s.pendingSince.IsZero() {
			s.pendingSince = now
		}
		for i, v := range p.vars {
			acc := v.accum
			for j, x := range p.Dense[i].Values {
				acc[j] += x
			}
		}
		for i, t := range p.tabs {
			t.accumulate(p.Sparse[i].keys(), p.Sparse[i].Values)
		}
		if verdict == consistency.Complete {
			if err := s.applyStep(st.layout.ReplicasToAggregate); err != nil {
				return Result{}, err
			}
		}
	}
	return Result{Verdict: verdict, Step: st.tracker.Step()}, nil
}

// update applies one dense gradient to v with the rule: whole (spread over
// the cores by Config.Update), or chunk by chunk with updated called after
// each. If replies in flight still read v's values, it updates a copy.
//
// The rule runs at the rate its schedule gives for the global step before
// this update (TF's global_step as the update reads it). A rule that is not
// per-coordinate (LAMB) is applied whole, and streamed as one chunk.
func (s *Shard) update(v *Var, grad []float32, stream *Stream) {
	s.stamp(v, grad)
	rule := v.sched.At(s.st.tracker.Step() - 1)
	if stream == nil {
		v.updates++
		v.writable()
		s.cfg.Update(rule, v.value, grad, v.state, v.updates)
		rebound(v, grad)
		return
	}
	if !optim.PerCoordinate(rule) {
		s.cfg.Update(rule, v.value, grad, v.state, v.updates)
		stream.Updated(v, 0, len(v.value))
		rebound(v, grad)
		return
	}
	if cap(s.scratch) < len(v.state) {
		s.scratch = make([][]float32, len(v.state))
	}
	st := s.scratch[:len(v.state)]
	defer clear(st)
	for lo := 0; lo < len(v.value); lo += stream.Chunk {
		hi := min(lo+stream.Chunk, len(v.value))
		for j := range st {
			st[j] = v.state[j][lo:hi]
		}
		rule.Update(v.value[lo:hi], grad[lo:hi], st, v.updates)
		stream.Updated(v, lo, hi)
	}
	rebound(v, grad)
}

// stream is the streamed dense update of an Apply verdict.
func (s *Shard) stream(p *Push, stream *Stream) {
	for _, v := range p.vars {
		v.updates++
		v.writable()
	}
	stream.Begin(s.st.tracker.Step())
	for i, v := range p.vars {
		stream.Var(i, v)
		s.update(v, p.Dense[i].Values, stream)
	}
}

func scaleBy(x []float32, k float32) {
	for j := range x {
		x[j] *= k
	}
}

// applyStep applies the average of a completed synchronous step's sum of
// count gradients, after the tracker advanced. An average whose update
// would make a value or its state not finite is not applied: the step
// fails (Failed reports it from then on, as a timed-out step does) with
// every value as it was, and so does the job until a restore.
func (s *Shard) applyStep(count int) error {
	st := s.st
	scale := 1 / float32(count)
	hook := s.cfg.Aggregated != nil
	for _, v := range st.order {
		scaleBy(v.accum, scale)
	}
	for _, t := range st.tableOrd {
		scaleBy(t.acc, scale)
	}
	for _, t := range st.tableOrd {
		// The check reads the rows the step updates: those a tier holds
		// come back first, as they would for the update.
		if err := t.fetch(t.accKeys); err != nil {
			return s.tierFailed(t, err)
		}
	}
	if err := s.checkStep(); err != nil {
		for _, v := range st.order {
			clear(v.accum)
		}
		for _, t := range st.tableOrd {
			clear(t.accPos)
			t.accKeys, t.acc = t.accKeys[:0], t.acc[:0]
		}
		s.pendingSince = time.Time{}
		s.syncFailed = fmt.Errorf("step %d: the average of the step's gradients was not applied: %w; failing the job (restore a checkpoint, or lower the learning rate)", st.tracker.Step()-1, err)
		s.rejected++
		s.cfg.Logf("%v", s.syncFailed)
		s.version++ // every waiting pull fails too
		return s.Failed()
	}
	if hook { // the whole step's average first, for the replicas
		s.aggregated()
	}
	for _, v := range st.order {
		s.update(v, v.accum, nil)
		clear(v.accum)
	}
	for _, t := range st.tableOrd {
		if err := t.applyAccumulated(st.tracker.Step()); err != nil {
			s.tierFailed(t, err)
		}
	}
	s.pendingSince = time.Time{}
	s.maybeEvict()
	s.version++
	return nil
}

// checkStep reports the first variable or table row that a completed
// synchronous step's average (accumulated and scaled) would make not
// finite.
func (s *Shard) checkStep() error {
	for _, v := range s.st.order {
		if err := s.checkResult(v, v.accum, 0, v.updates+1, s.st.tracker.Step()-1); err != nil {
			return err
		}
	}
	for _, t := range s.st.tableOrd {
		if err := t.checkPush(t.accKeys, nil, t.acc, 0, s.st.tracker.Step()-1); err != nil {
			return fmt.Errorf("table %q: %w; refused whole, nothing changed", t.name, err)
		}
	}
	return nil
}

// refuseResult counts and logs an asynchronous push whose update would
// make a value not finite, and returns its Invalid error naming the
// variable and the step.
func (s *Shard) refuseResult(worker int, step int64, err error) error {
	s.rejected++
	s.cfg.Logf("refused push from worker %d at step %d: %v (rejected pushes so far: %d)", worker, step, err, s.rejected)
	return &Error{Kind: Invalid, Msg: fmt.Sprintf("ps %d refused the push of worker %d at step %d: %v", s.cfg.Task, worker, step, err), Err: fmt.Errorf("%w: %w", ErrNonFinite, err)}
}

// Tick enforces the synchronous step timeout at time now: a step that has
// waited SyncTimeout for missing gradients completes with those that came
// (SyncProceed) or fails the job, naming the missing workers (Failed then
// reports it, and every later push and waiting pull fails with it).
func (s *Shard) Tick(now time.Time) {
	if s.st == nil {
		return
	}
	l := s.st.layout
	if l.SyncTimeout <= 0 || s.pendingSince.IsZero() || s.syncFailed != nil || now.Sub(s.pendingSince) < l.SyncTimeout {
		return
	}
	step := s.st.tracker.Step()
	have, want, missing := s.st.tracker.Waiting()
	if l.SyncProceed {
		n := s.st.tracker.ForceComplete()
		s.cfg.Logf("step %d: --sync_timeout=%s passed with %d of %d gradients (none from workers %v); completing the step with those (--sync_on_timeout=proceed)", step, l.SyncTimeout, have, want, missing)
		_ = s.applyStep(n) // a failure is logged and kept in Failed
		return
	}
	s.syncFailed = fmt.Errorf("step %d: no gradient from workers %v within --sync_timeout=%s (%d of %d arrived); failing the job (--sync_on_timeout=fail; use proceed, backup workers, or restart the missing worker)", step, missing, l.SyncTimeout, have, want)
	s.cfg.Logf("%v", s.syncFailed)
	s.version++ // every waiting pull fails too
}

// SyncTimeout is the synchronous step timeout, 0 if none.
func (s *Shard) SyncTimeout() time.Duration {
	if s.st == nil {
		return 0
	}
	return s.st.layout.SyncTimeout
}
