package shard

import (
	"fmt"
	"slices"

	"github.com/paramserv/paramserv/internal/optim"
)

// ChangeRate changes the job's learning rate and schedule from global step
// c.From on: every update the shard applies at a step >= c.From (the step
// before the update, as the schedule reads it) uses c's rate and schedule.
// Variables and tables with their own rule keep theirs. A change for a step
// the shard has passed applies from its next update (the chief names a
// step ahead of every ps, so all switch at the same one). The change is in
// Layout().RateChanges, which the chief's checkpoint records; a change at
// the same step as an earlier one replaces it.
func (s *Shard) ChangeRate(c optim.RateChange) error {
	if s.st == nil {
		return &Error{Kind: NotReady, Msg: fmt.Sprintf("ps %d: %v", s.cfg.Task, ErrNotInitialized), Err: ErrNotInitialized}
	}
	if err := s.st.sched.Change(c); err != nil {
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("ps %d refused the rate change: %v", s.cfg.Task, err), Err: err}
	}
	ch := s.st.layout.RateChanges
	i := slices.IndexFunc(ch, func(o optim.RateChange) bool { return o.From == c.From })
	if i >= 0 {
		ch[i] = c
	} else {
		ch = append(ch, c)
		slices.SortFunc(ch, func(a, b optim.RateChange) int { return int(min(max(a.From-b.From, -1), 1)) })
	}
	s.st.layout.RateChanges = ch
	step := s.st.tracker.Step()
	when := fmt.Sprintf("from global step %d", c.From)
	if c.From < step {
		when = fmt.Sprintf("from global step %d, already passed: from the next update (step %d)", c.From, step)
	}
	sched := c.Schedule
	if sched == "" {
		sched = "constant"
	}
	s.cfg.Logf("learning rate changed %s: %v, schedule %s (rate now %v)", when, c.LearningRate, sched, s.Rate())
	return nil
}

// Rate is the job's rule's learning rate in force for the next update; 0
// before Init.
func (s *Shard) Rate() float64 {
	if s.st == nil {
		return 0
	}
	return s.st.sched.Rate(s.st.tracker.Step())
}
