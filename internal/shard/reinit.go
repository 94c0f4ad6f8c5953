package shard

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/paramserv/paramserv/internal/optim"
)

// again is Init on a shard that already has state: the chief restarted,
// the ps restored a checkpoint, or another client sent an Init first.
// The layout's variables and tables already matched (sameLayout). What a
// job may change across a restart is applied and logged: the optimizer's
// hyper-parameters (the learning rate above all) and the synchronous step
// timeout and its action. What it may not is refused as a Conflict naming
// the flag: another optimizer (its state would mean nothing), the mode,
// replicas_to_aggregate, max_staleness. An Init whose initial values differ
// from those of a state that has applied no update yet is refused too,
// naming the variable: two Inits raced (or a chief's initial values are
// not seeded), and the model must not be whoever's came first.
//
// The changes are checked whole before any is made.
func (s *Shard) again(l Layout, values [][]float32) error {
	st := s.st
	have := st.layout
	step := st.tracker.Step()
	conflict := func(flag, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		return &Error{Kind: Conflict, Flag: flag, Msg: fmt.Sprintf("ps %d at global step %d: %s: %s cannot change for a model already initialised (restart with the flag as it was, or start from an empty --checkpoint_dir)", s.cfg.Task, step, msg, flag)}
	}
	switch {
	case have.Sync != l.Sync:
		return conflict("--sync", "the ps trains %s, this Init asks for %s", modeName(have.Sync), modeName(l.Sync))
	case have.Sync && have.ReplicasToAggregate != l.ReplicasToAggregate:
		return conflict("--replicas_to_aggregate", "the ps averages %d gradients per step, this Init asks for %d", have.ReplicasToAggregate, l.ReplicasToAggregate)
	case !have.Sync && have.MaxStaleness != l.MaxStaleness:
		return conflict("--max_staleness", "the ps drops pushes older than %d steps, this Init asks for %d", have.MaxStaleness, l.MaxStaleness)
	case have.Optimizer.Name != l.Optimizer.Name:
		return conflict("--optimizer", "the ps updates with %s, this Init asks for %s", have.Optimizer.Name, l.Optimizer.Name)
	}
	if err := s.sameInitialValues(l, values); err != nil {
		return err
	}
	changes := optimizerChanges(have.Optimizer, l.Optimizer)
	if len(changes) > 0 {
		sched, err := optim.NewScheduled(l.Optimizer, have.RateChanges)
		if err != nil {
			return &Error{Kind: Invalid, Flag: "--optimizer", Msg: fmt.Sprintf("ps %d: optimizer %s: %v", s.cfg.Task, l.Optimizer.Name, err), Err: err}
		}
		rule := sched.Rule()
		if rule.StateSlots() != st.rule.StateSlots() {
			return conflict("--optimizer", "%s with these settings keeps %d state slots, the ps's %d", l.Optimizer.Name, rule.StateSlots(), st.rule.StateSlots())
		}
		for _, t := range st.tableOrd {
			if t.spec.Optimizer == nil {
				if err := t.t.SetRule(rule); err != nil {
					return conflict(changes[0].flag, "sparse table %q: %v", t.name, err)
				}
				t.rule, t.sched = rule, sched
				t.loseBound()
			}
		}
		for _, v := range st.order {
			if v.sched == st.sched {
				v.rule, v.sched = rule, sched
			}
		}
		st.rule, st.sched = rule, sched
		st.layout.Optimizer = l.Optimizer
		for _, c := range changes {
			s.cfg.Logf("ps %d: %s %s → %s from step %d (%s of the chief's Init)", s.cfg.Task, c.name, c.was, c.now, step, c.flag)
		}
	}
	if have.SyncTimeout != l.SyncTimeout {
		s.cfg.Logf("ps %d: sync timeout %s → %s from step %d (--sync_timeout of the chief's Init)", s.cfg.Task, have.SyncTimeout, l.SyncTimeout, step)
		st.layout.SyncTimeout = l.SyncTimeout
	}
	if have.SyncProceed != l.SyncProceed {
		s.cfg.Logf("ps %d: on a sync timeout, proceed %v → %v from step %d (--sync_on_timeout of the chief's Init)", s.cfg.Task, have.SyncProceed, l.SyncProceed, step)
		st.layout.SyncProceed = l.SyncProceed
	}
	if l.GoalStep > 0 && have.GoalStep != l.GoalStep {
		// A job resumed with another --train_steps: the chief's goal wins.
		if have.GoalStep > 0 {
			s.cfg.Logf("ps %d: goal step %d → %d at step %d (--train_steps of the chief's Init)", s.cfg.Task, have.GoalStep, l.GoalStep, step)
		}
		st.layout.GoalStep = l.GoalStep
		st.tracker.SetGoal(l.GoalStep)
	}
	return nil
}

func modeName(sync bool) string {
	if sync {
		return "synchronously"
	}
	return "asynchronously"
}

// sameInitialValues refuses an Init whose values differ from those of a
// state built by Init that has applied no update since (values are
// ignored once training has moved them, and for a restored state).
func (s *Shard) sameInitialValues(l Layout, values [][]float32) error {
	st := s.st
	if st.restored >= 0 || st.tracker.Step() != st.layout.GlobalStep || len(values) != len(st.order) {
		return nil
	}
	for _, v := range st.order {
		if v.updates != 0 {
			return nil
		}
	}
	for i, v := range st.order {
		if len(values[i]) != len(v.value) {
			continue
		}
		for j, x := range values[i] {
			if math.Float32bits(x) != math.Float32bits(v.value[j]) {
				return &Error{Kind: Conflict, Flag: "initial values", Msg: fmt.Sprintf(
					"ps %d was initialised by an earlier Init with other values: variable %q element %d is %v there, %v in this Init; the model must not be whoever's Init came first (was another chief started, or are the initial values not seeded? restart the ps to start over)",
					s.cfg.Task, v.name, j, v.value[j], x)}
			}
		}
	}
	return nil
}

// optimizerChange is one hyper-parameter a repeated Init changes.
type optimizerChange struct {
	name, flag string
	was, now   string
}

// optimizerChanges lists the hyper-parameters in which two configurations
// of the same rule differ, as the log names them. Both are compared with
// their defaults written out (optim.Resolved): a restart that spells out
// --beta1=0.9 where the first run left Adam's default changes nothing.
func optimizerChanges(a, b optim.Config) []optimizerChange {
	a, b = optim.Resolved(a), optim.Resolved(b)
	var out []optimizerChange
	f := func(name, flag string, x, y float64) {
		if x != y && !(math.IsNaN(x) && math.IsNaN(y)) {
			out = append(out, optimizerChange{name, flag, fmt.Sprint(x), fmt.Sprint(y)})
		}
	}
	f("learning rate", "--learning_rate", a.LearningRate, b.LearningRate)
	f("momentum", "--momentum", a.Momentum, b.Momentum)
	if a.Nesterov != b.Nesterov {
		out = append(out, optimizerChange{"nesterov", "--use_nesterov", fmt.Sprint(a.Nesterov), fmt.Sprint(b.Nesterov)})
	}
	f("initial accumulator", "--initial_accumulator_value", a.InitialAccumulator, b.InitialAccumulator)
	f("beta1", "--beta1", a.Beta1, b.Beta1)
	f("beta2", "--beta2", a.Beta2, b.Beta2)
	f("epsilon", "--epsilon", a.Epsilon, b.Epsilon)
	f("ftrl beta", "--ftrl_beta", a.FTRLBeta, b.FTRLBeta)
	f("l1", "--l1", a.L1, b.L1)
	f("l2", "--l2", a.L2, b.L2)
	f("l2 shrinkage", "--l2_shrinkage", a.L2Shrinkage, b.L2Shrinkage)
	if strings.EqualFold(a.Name, "ftrl") || strings.EqualFold(b.Name, "ftrl") {
		f("learning rate power", "--learning_rate_power", a.FTRLPower(), b.FTRLPower())
	}
	f("rho", "--rho", a.Rho, b.Rho)
	if a.Centered != b.Centered {
		out = append(out, optimizerChange{"centered", "--centered", fmt.Sprint(a.Centered), fmt.Sprint(b.Centered)})
	}
	f("weight decay", "--weight_decay", a.WeightDecay, b.WeightDecay)
	if a.Schedule != b.Schedule {
		out = append(out, optimizerChange{"learning-rate schedule", "--lr_schedule", fmt.Sprintf("%q", a.Schedule), fmt.Sprintf("%q", b.Schedule)})
	}
	return slices.Clip(out)
}
