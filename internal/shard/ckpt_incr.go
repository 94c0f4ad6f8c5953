package shard

import (
	"slices"

	"github.com/paramserv/paramserv/internal/table/sparse"
)

// Incremental checkpoints. A shard remembers which checkpoint its last
// incremental cut was for (State.lastCut) and what changed since: each
// variable's update count at that cut, and each table's dirty rows and
// evicted keys (sparse.Table's change tracking), and those of the rows a
// second tier holds (Tier.CutChanges). CutIncremental then writes
// a delta against that checkpoint, or a full cut when it cannot (no such
// cut, a restart, a table that lost track of its evictions), and starts a
// new interval either way. A restored state starts one at the checkpoint
// it came from.

// CutIncremental is Cut for a job that saves incremental checkpoints. id
// is the checkpoint being saved and parent the one the chief wants a delta
// against (-1: a full checkpoint). The cut is a delta (Cut.Delta) when this
// shard's previous incremental cut, or the checkpoint it restored, was
// parent and it knows every change since; otherwise it is a full cut. Like
// Cut, it runs under the caller's lock; a delta costs a copy of the changed
// variables and rows only.
func (s *Shard) CutIncremental(id, parent int64) *Cut {
	st := s.st
	if parent >= 0 && parent == st.lastCut {
		if c, ok := s.deltaCut(parent); ok {
			st.lastCut = id
			return c
		}
		s.cfg.Logf("checkpoint %d: a table lost track of its evicted rows since checkpoint %d; writing a full shard", id, parent)
	}
	c := s.Cut()
	st.resetChanges(id)
	return c
}

// deltaCut copies what changed since the last cut, and starts a new
// interval; false (and nothing changed) if a table does not know.
func (s *Shard) deltaCut(parent int64) (*Cut, bool) {
	st := s.st
	for _, t := range st.tableOrd {
		if !t.t.ChangesKnown() || t.tier != nil && !t.tier.ChangesKnown() {
			return nil, false
		}
	}
	c := &Cut{step: st.tracker.Step(), delta: true, parent: parent, updates: map[string]int64{}, rates: slices.Clone(st.layout.RateChanges)}
	for _, v := range st.order {
		name := baseName(v.name)
		c.updates[name] = max(c.updates[name], v.updates)
		if v.updates == v.cutAt {
			continue
		}
		v.cutAt = v.updates
		cv := cutVar{name: name, shape: v.shape, value: slices.Clone(v.value), updates: v.updates,
			slots: SlotNames(v.rule.Name(), v.rule.StateSlots())}
		for _, state := range v.state {
			cv.state = append(cv.state, slices.Clone(state))
		}
		c.vars = append(c.vars, cv)
	}
	for _, t := range st.tableOrd {
		var rows *sparse.Table
		var deleted []uint64
		rows, deleted, _ = t.t.FrozenChanges()
		ft := frozenTable{name: t.name, t: rows, deleted: deleted, slots: SlotNames(t.rule.Name(), t.rule.StateSlots())}
		if t.tier != nil {
			ft.coldChanges = t.tier.CutChanges()
		}
		c.tables = append(c.tables, ft)
	}
	return c, true
}

// resetChanges starts a new interval of change tracking at checkpoint id:
// what the shard holds now is what that checkpoint holds.
func (st *State) resetChanges(id int64) {
	for _, v := range st.order {
		v.cutAt = v.updates
	}
	for _, t := range st.tableOrd {
		t.t.ResetChanges()
		if t.tier != nil {
			t.tier.ResetChanges()
		}
	}
	st.lastCut = id
}

// Delta reports whether the cut holds only the changes since Parent.
func (c *Cut) Delta() bool { return c.delta }

// Parent is the checkpoint a delta cut applies to.
func (c *Cut) Parent() int64 { return c.parent }
