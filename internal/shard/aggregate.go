package shard

import "fmt"

// Replication after aggregation (docs/REPLICATION.md): in synchronous mode
// a primary copy of a shard reports each completed step's averaged dense
// gradients (Config.Aggregated), and a backup copy applies them with
// ApplyAggregate instead of every worker's push. The rule then runs on the
// same bytes at the same update count, so both copies hold the same bytes,
// optimizer state included.

func (s *Shard) aggregated() {
	st := s.st
	if cap(s.aggBuf) < len(st.order) {
		s.aggBuf = make([][]float32, len(st.order))
	}
	grads := s.aggBuf[:len(st.order)]
	for i, v := range st.order {
		grads[i] = v.accum
	}
	var rows []RowGrads
	if len(st.tableOrd) > 0 {
		rows = make([]RowGrads, len(st.tableOrd))
		for i, t := range st.tableOrd {
			rows[i] = RowGrads{Keys: t.accKeys, Values: t.acc}
		}
	}
	s.cfg.Aggregated(st.tracker.Step()-1, grads, rows)
	clear(grads)
}

// ApplyAggregate applies a synchronous step's averaged dense gradients, one
// per variable in layout order, and row gradients, one per table in layout
// order, as the primary copy's Aggregated reported them for step, and
// moves to step+1. The shard must be synchronous, be at step, and have no
// gradients of that step accumulated.
func (s *Shard) ApplyAggregate(step int64, grads [][]float32, rows []RowGrads) error {
	if s.st == nil {
		return &Error{Kind: NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, ErrNotInitialized), Err: ErrNotInitialized}
	}
	st := s.st
	switch {
	case !st.layout.Sync:
		return errorf(Invalid, "ps %d: an aggregate of step %d for an asynchronous shard: aggregates are replicated in sync mode only", s.cfg.Task, step)
	case len(rows) != len(st.tableOrd):
		return errorf(Invalid, "ps %d: an aggregate of %d tables, this shard holds %d", s.cfg.Task, len(rows), len(st.tableOrd))
	case step != st.tracker.Step():
		return errorf(Invalid, "ps %d: an aggregate of step %d, but this copy is at step %d", s.cfg.Task, step, st.tracker.Step())
	case len(grads) != len(st.order):
		return errorf(Invalid, "ps %d: an aggregate of %d variables, this shard holds %d", s.cfg.Task, len(grads), len(st.order))
	}
	if have, _, _ := st.tracker.Waiting(); have > 0 {
		return errorf(Invalid, "ps %d: an aggregate of step %d, but %d gradients of it are accumulated here", s.cfg.Task, step, have)
	}
	for i, v := range st.order {
		if len(grads[i]) != len(v.value) {
			return errorf(Invalid, "ps %d: aggregate of %q has %d values, want %d", s.cfg.Task, v.name, len(grads[i]), len(v.value))
		}
	}
	for i, t := range st.tableOrd {
		if dim := t.t.Dim(); len(rows[i].Values) != dim*len(rows[i].Keys) {
			return errorf(Invalid, "ps %d: aggregate of table %q has %d values for %d keys of dim %d", s.cfg.Task, t.name, len(rows[i].Values), len(rows[i].Keys), dim)
		}
		if err := s.CheckOwned([]byte(t.name), rows[i].Keys); err != nil {
			return errorf(Invalid, "ps %d: aggregate: %w", s.cfg.Task, err)
		}
	}
	// The primary checked this average before it applied it; a copy checks
	// it again, so that what it holds (and checkpoints) stays finite
	// whatever it is sent.
	for i, v := range st.order {
		if err := s.checkResult(v, grads[i], 0, v.updates+1, step); err != nil {
			return errorf(Invalid, "ps %d: aggregate of step %d: %v", s.cfg.Task, step, err)
		}
	}
	for i, t := range st.tableOrd {
		if len(rows[i].Keys) == 0 {
			continue
		}
		if err := t.fetch(rows[i].Keys); err != nil {
			return s.tierFailed(t, err)
		}
		if err := t.checkPush(rows[i].Keys, nil, rows[i].Values, 0, step); err != nil {
			return errorf(Invalid, "ps %d: aggregate of step %d: table %q: %v; refused whole, nothing changed", s.cfg.Task, step, t.name, err)
		}
	}
	st.tracker.SetStep(step + 1)
	for i, v := range st.order {
		s.update(v, grads[i], nil)
	}
	for i, t := range st.tableOrd {
		if len(rows[i].Keys) > 0 {
			if err := t.push(rows[i].Keys, nil, rows[i].Values, st.tracker.Step()); err != nil {
				return s.tierFailed(t, err)
			}
		}
	}
	s.maybeEvict()
	s.version++
	return nil
}
