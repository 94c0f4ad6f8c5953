package shard

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// sketchWidth is the admission sketch's width of every table (0: the
// package default, 4 MiB of counters); tests make it small.
var sketchWidth = 0

// table is one sparse table of the shard with, in synchronous mode, the
// sum of the current step's row gradients.
type table struct {
	name       string
	spec       TableSpec
	t          *sparse.Table
	rule       optim.Rule       // the layout's rule or the table's own
	sched      *optim.Scheduled // rule under its schedule
	evictEvery int64
	tier       Tier // nil: every row in memory

	// sync accumulator: accKeys[i] has gradient acc[i*dim:(i+1)*dim].
	accPos  map[uint64]int
	accKeys []uint64
	acc     []float32

	touchBuf []float32 // TouchRows's values, read and dropped

	bnd tableBound // ranges that let a push skip its trial (sparse_bound.go)
}

func newTables(l Layout, sched *optim.Scheduled) (map[string]*table, []*table, error) {
	tables := make(map[string]*table, len(l.Tables))
	var order []*table
	for _, spec := range l.Tables {
		if _, dup := tables[spec.Name]; dup {
			return nil, nil, fmt.Errorf("table %q given twice", spec.Name)
		}
		if len(spec.Name) == 0 || len(spec.Name) > format.MaxName {
			return nil, nil, fmt.Errorf("table %.40q has a %d-byte name (want 1 to %d)", spec.Name, len(spec.Name), format.MaxName)
		}
		rs, err := schedOf(sched, spec.Optimizer)
		if err != nil {
			return nil, nil, fmt.Errorf("table %q: %w", spec.Name, err)
		}
		r := rs.Rule()
		cfg := sparse.Config{Dim: int(spec.Dim), Rule: r, MinCount: int(spec.MinCount), EvictAfterSteps: spec.EvictAfterSteps, SketchWidth: sketchWidth}
		switch spec.Initializer {
		case "", "zeros":
		case "normal":
			cfg.Init = sparse.RandomNormal{Stddev: float32(spec.InitStddev), Seed: spec.Seed}
		default:
			return nil, nil, fmt.Errorf("table %q: unknown initializer %q (want zeros or normal)", spec.Name, spec.Initializer)
		}
		t, err := sparse.New(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("table %q: %w", spec.Name, err)
		}
		st := &table{name: spec.Name, spec: spec, t: t, rule: r, sched: rs, evictEvery: max(1, spec.EvictAfterSteps/10)}
		if l.Sync {
			st.accPos = make(map[uint64]int)
		}
		tables[spec.Name] = st
		order = append(order, st)
	}
	return tables, order, nil
}

// push applies an asynchronous step's gradient to the table's rows, through
// the remembered rows of a key set where there is one (the same result).
// step is the global step after the update (the rate is the one in force
// at step-1).
func (t *table) push(keys []uint64, set *sparse.KeySet, grads []float32, step int64) error {
	if err := t.fetch(keys); err != nil {
		return err
	}
	var err error
	t.schedule(step - 1)
	if set != nil {
		err = t.t.PushSet(set, grads, step)
	} else {
		err = t.t.Push(keys, grads, step)
	}
	// The push was checked; the table can only refuse a malformed one.
	if err != nil {
		panic(fmt.Sprintf("shard: checked push refused by table %q: %v", t.name, err))
	}
	t.rebound(grads, len(keys))
	return nil
}

// accumulate adds a synchronous step's row gradients to the sum.
func (t *table) accumulate(keys []uint64, grads []float32) {
	dim := t.t.Dim()
	for i, k := range keys {
		pos, ok := t.accPos[k]
		if !ok {
			pos = len(t.accKeys)
			t.accPos[k] = pos
			t.accKeys = append(t.accKeys, k)
			t.acc = append(t.acc, make([]float32, dim)...)
		}
		row := t.acc[pos*dim : (pos+1)*dim]
		for j := range row {
			row[j] += grads[i*dim+j]
		}
	}
}

// schedule sets the table's rule to its schedule's at step at: the rule an
// update that makes step at+1 runs.
func (t *table) schedule(at int64) {
	if !t.sched.Constant() {
		if err := t.t.SetRule(t.sched.At(at)); err != nil {
			panic(fmt.Sprintf("shard: table %q: %v", t.name, err))
		}
	}
}

// checkPush is the table's CheckPush at the rate the push will run at (its
// schedule at step at, as push sets it), as checkResult tries a variable's
// update: a schedule that raises the rate must not let the check pass a
// push the real update makes not finite.
// With a key set (the push's remembered rows) it tries the rows as the push
// will find them, without the index; one whose result the table's ranges
// bound is not tried (sparse_bound.go).
func (t *table) checkPush(keys []uint64, set *sparse.KeySet, grads []float32, known float32, at int64) error {
	t.schedule(at)
	if t.boundedPush(set, grads, known) {
		return nil
	}
	t.bnd.tried++
	if set != nil {
		return t.t.CheckPushSet(set, grads)
	}
	return t.t.CheckPush(keys, grads)
}

// applyAccumulated applies the sum, scaled already by 1/replicas, and
// clears it.
func (t *table) applyAccumulated(step int64) error {
	if len(t.accKeys) == 0 {
		return nil
	}
	err := t.push(t.accKeys, nil, t.acc, step)
	clear(t.accPos)
	t.accKeys, t.acc = t.accKeys[:0], t.acc[:0]
	return err
}

// maybeEvict runs eviction every tenth of each table's idle limit, after
// the step advanced.
func (s *Shard) maybeEvict() {
	step := s.st.tracker.Step()
	for _, t := range s.st.tableOrd {
		if t.spec.EvictAfterSteps > 0 && step%t.evictEvery == 0 {
			if n := t.t.Evict(step); n > 0 {
				s.cfg.Logf("table %q: evicted %d rows idle for more than %d steps (%d rows left)", t.name, n, t.spec.EvictAfterSteps, t.t.Len())
			}
		}
	}
}

func (t *table) status() TableStatus {
	st := t.t.Stats()
	out := TableStatus{
		Name: t.name, Rows: int64(st.Rows), Bytes: st.Bytes, Admitted: st.Admitted,
		Evicted: st.Evicted, RejectedByAdmission: st.RejectedPulls + st.RejectedPushes,
	}
	if t.tier != nil {
		c := t.tier.Counts()
		out.Rows += c.Rows
		out.TierRows, out.TierLookups, out.TierHits = c.Rows, c.Lookups, c.Hits
	}
	return out
}

// TableDim returns the row width of a table, or an Invalid error naming
// the tables held.
func (s *Shard) TableDim(name []byte) (int, error) {
	if s.st == nil {
		return 0, &Error{Kind: NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, ErrNotInitialized), Err: ErrNotInitialized}
	}
	t, ok := s.st.tables[string(name)]
	if !ok {
		return 0, errorf(Invalid, "ps %d: unknown table %q (this ps holds %d tables)", s.cfg.Task, name, len(s.st.tables))
	}
	return t.t.Dim(), nil
}

// PullRows writes the rows of keys (or of set, if not nil) of a table into
// dst (len(keys)*dim values), checking (unless owned) that this ps owns
// every key. Keys not yet admitted read as their initial value.
func (s *Shard) PullRows(name []byte, keys []uint64, set *sparse.KeySet, owned bool, dst []float32) error {
	if _, err := s.TableDim(name); err != nil {
		return err
	}
	t := s.st.tables[string(name)]
	if set != nil {
		keys = set.Keys()
	}
	if !owned {
		if err := s.CheckOwned(name, keys); err != nil {
			return errorf(Invalid, "ps %d: %w", s.cfg.Task, err)
		}
	}
	if err := t.fetch(keys); err != nil {
		return s.tierFailed(t, err)
	}
	var err error
	switch {
	case s.cfg.PeekPulls:
		err = t.t.Peek(keys, dst)
	case set != nil:
		err = t.t.PullSet(set, dst)
	default:
		err = t.t.Pull(keys, dst)
	}
	if err != nil {
		return errorf(Invalid, "ps %d: table %q: %w", s.cfg.Task, name, err)
	}
	return nil
}

// ResolveRows finds the rows of set's keys in table name now, creating
// those not there yet as the PullRows of set that follows would, so that
// PullRows (and a push of set) then only copy and update them: a
// standalone job resolves the next batch's keys while its model computes
// (trainer's localPS). It reports false, changing nothing, where moving a
// lookup ahead of the pushes before it could change what they or the pull
// do: a table that admits keys by count (MinCount), evicts, has a disk
// tier or a key cap, pulls that only peek, or a synchronous layout.
func (s *Shard) ResolveRows(name []byte, set *sparse.KeySet) (bool, error) {
	if _, err := s.TableDim(name); err != nil {
		return false, err
	}
	t := s.st.tables[string(name)]
	if t.spec.MinCount > 1 || t.spec.EvictAfterSteps > 0 || t.tier != nil || s.cfg.MaxTableKeys > 0 || s.cfg.PeekPulls || s.st.layout.Sync {
		return false, nil
	}
	if err := s.CheckOwned(name, set.Keys()); err != nil {
		return false, errorf(Invalid, "ps %d: %w", s.cfg.Task, err)
	}
	t.t.ResolveSet(set)
	return true, nil
}

// PullChanges reports whether PullRows of keys (without PeekPulls) would
// change the table: count a key for admission or give it a row.
func (s *Shard) PullChanges(name []byte, keys []uint64) (bool, error) {
	if _, err := s.TableDim(name); err != nil {
		return false, err
	}
	t := s.st.tables[string(name)]
	if err := t.fetch(keys); err != nil {
		return false, s.tierFailed(t, err)
	}
	return t.t.PullChanges(keys), nil
}

// TouchRows makes the changes PullRows of keys makes to a table without
// PeekPulls (admission counts, new rows), reading nothing: a copy of a
// replicated shard applies a logged pull with it (docs/REPLICATION.md).
func (s *Shard) TouchRows(name []byte, keys []uint64) error {
	dim, err := s.TableDim(name)
	if err != nil {
		return err
	}
	if err := s.CheckOwned(name, keys); err != nil {
		return errorf(Invalid, "ps %d: %w", s.cfg.Task, err)
	}
	t := s.st.tables[string(name)]
	if err := t.fetch(keys); err != nil {
		return s.tierFailed(t, err)
	}
	if n := len(keys) * dim; cap(t.touchBuf) < n {
		t.touchBuf = make([]float32, n)
	}
	if err := t.t.Pull(keys, t.touchBuf[:len(keys)*dim]); err != nil {
		return errorf(Invalid, "ps %d: table %q: %w", s.cfg.Task, name, err)
	}
	return nil
}
