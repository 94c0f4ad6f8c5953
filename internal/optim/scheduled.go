package optim

import (
	"fmt"
	"slices"
)

// RateChange is a change of a rule's learning rate and schedule that takes
// effect at global step From: from then on the rate is Schedule (ParseSchedule
// syntax) applied to LearningRate, on the global step (not on the steps since
// From). The chief makes one while training; every ps applies it at the same
// step.
type RateChange struct {
	From         int64   `json:"from"`
	LearningRate float64 `json:"learning_rate"`
	Schedule     string  `json:"schedule,omitempty"`
}

// Scheduled is a rule under its learning-rate schedule and the changes made
// to it while training: At(step) is the rule to apply at a global step. It
// caches the last step's rule, so it is not safe for concurrent use (the ps
// calls it under its lock); the rules At returns are immutable and may be
// used from any goroutine.
type Scheduled struct {
	base   Rule
	phases []phase // by From, increasing; phases[0].from is the minimum int64

	step int64 // the step cur is for
	cur  Rule
	ok   bool // cur is set
}

type phase struct {
	from  int64
	lr    float64
	sched Schedule
}

// NewScheduled is the rule cfg names under cfg's schedule, with changes
// (in any order; later changes at the same step win) on top.
func NewScheduled(cfg Config, changes []RateChange) (*Scheduled, error) {
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	sch, _ := ParseSchedule(cfg.Schedule) // New checked it
	s := &Scheduled{base: r, phases: []phase{{from: -1 << 63, lr: cfg.LearningRate, sched: sch}}}
	for _, c := range changes {
		if err := s.Change(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Change adds a change of rate and schedule from step c.From. It checks the
// rate and the schedule as New does.
func (s *Scheduled) Change(c RateChange) error {
	probe := Config{Name: s.base.Name(), LearningRate: c.LearningRate, Schedule: c.Schedule}
	if err := validate(s.base.Name(), probe); err != nil {
		return err
	}
	sch, err := ParseSchedule(c.Schedule)
	if err != nil {
		return err
	}
	if c.From < 0 {
		return fmt.Errorf("%w: a rate change from step %d, want >= 0", ErrInvalidConfig, c.From)
	}
	i, found := slices.BinarySearchFunc(s.phases, c.From, func(p phase, from int64) int {
		switch {
		case p.from < from:
			return -1
		case p.from > from:
			return 1
		}
		return 0
	})
	p := phase{from: c.From, lr: c.LearningRate, sched: sch}
	if found {
		s.phases[i] = p
	} else {
		s.phases = slices.Insert(s.phases, i, p)
	}
	s.ok = false
	return nil
}

// Rule is the rule at its configured learning rate.
func (s *Scheduled) Rule() Rule { return s.base }

// Constant says whether the rate is the same at every step.
func (s *Scheduled) Constant() bool {
	return len(s.phases) == 1 && s.phases[0].sched.Constant()
}

// Rate is the learning rate at global step step (TF's global_step when the
// update is applied: the number of steps before it).
func (s *Scheduled) Rate(step int64) float64 {
	i := len(s.phases) - 1
	for i > 0 && s.phases[i].from > step {
		i--
	}
	p := s.phases[i]
	return p.sched.Rate(p.lr, step)
}

// At is the rule to apply at global step step.
func (s *Scheduled) At(step int64) Rule {
	if s.Constant() {
		return s.base
	}
	if !s.ok || s.step != step {
		s.cur, s.step, s.ok = WithRate(s.base, s.Rate(step)), step, true
	}
	return s.cur
}
