package shard

import (
	"fmt"
	"sync/atomic"

	"github.com/paramserv/paramserv/internal/format"
	"github.com/paramserv/paramserv/internal/optim"
)

// trialChunk is how many values a trial update works on at a time: small
// enough that the copies stay in the core's cache.
const trialChunk = 4096

// trial is the scratch of a trial update: a chunk of values and of each
// state slot.
type trial struct {
	value []float32
	state [][]float32
	views [][]float32
}

// checkResult runs the update of v by grad at update count step on copies,
// a chunk at a time, and reports the first value or state the rule would
// make infinite or NaN, so that a push whose result is not finite is
// refused before anything changes (a gradient of finite values can still
// overflow: 3e38 pushed repeatedly drives a value to -Inf). The shard's
// values and state are only read. at is the global step whose rate the
// update will run at (see update): the rule tried is the one in force then.
func (s *Shard) checkResult(v *Var, grad []float32, known float32, step, at int64) error {
	rule := v.sched.At(at)
	if bounded(v, rule, grad, known, step) {
		return nil // the rule's bounds rule overflow out (bound.go)
	}
	// The trial is spread over the cores as the update is (Config.Update);
	// only when it finds a value not finite is it run again here, to say
	// which.
	s.trialRule.Rule = rule
	s.trialRule.bad.Store(false)
	s.cfg.Update(&s.trialRule, v.value, grad, v.state, step)
	s.trialRule.Rule = nil
	if !s.trialRule.bad.Load() {
		return nil
	}
	tr := &s.trial
	if tr.value == nil {
		tr.value = make([]float32, trialChunk)
	}
	for len(tr.state) < len(v.state) {
		tr.state = append(tr.state, make([]float32, trialChunk))
	}
	if cap(tr.views) < len(v.state) {
		tr.views = make([][]float32, len(v.state))
	}
	views := tr.views[:len(v.state)]
	defer clear(views)
	for lo := 0; lo < len(v.value); lo += trialChunk {
		hi := min(lo+trialChunk, len(v.value))
		val := tr.value[:hi-lo]
		copy(val, v.value[lo:hi])
		for j := range views {
			views[j] = tr.state[j][:hi-lo]
			copy(views[j], v.state[j][lo:hi])
		}
		rule.Update(val, grad[lo:hi], views, step)
		if i := format.FirstNonFinite(val); i >= 0 {
			return fmt.Errorf("variable %q: the update would make element %d %v (it is %v, the gradient %v); refused whole, nothing changed", v.name, lo+i, val[i], v.value[lo+i], grad[lo+i])
		}
		for j, sv := range views {
			if i := format.FirstNonFinite(sv); i >= 0 {
				return fmt.Errorf("variable %q: the update would make %s state slot %d element %d %v (the gradient is %v); refused whole, nothing changed", v.name, rule.Name(), j, lo+i, sv[i], grad[lo+i])
			}
		}
	}

	return fmt.Errorf("variable %q: the update would not be finite; refused whole, nothing changed", v.name)
}

// trialRule updates copies of what it is given, a chunk at a time, and
// records whether any value or state would not be finite; it changes
// nothing. Config.Update may run it on several goroutines at once, over
// parts of one variable.
type trialRule struct {
	optim.Rule
	bad   atomic.Bool
	taken atomic.Bool // buf and views are in use by a call
	buf   []float32   // a chunk of value and of each state slot, kept for the next push
	views [][]float32 // the state slots' chunks in buf
}

func (t *trialRule) Update(param, grad []float32, state [][]float32, step int64) {
	const chunk = trialChunk
	need := chunk * (1 + len(state))
	var buf []float32
	var views [][]float32
	if t.taken.CompareAndSwap(false, true) {
		// The first call (the only one unless Config.Update spreads the
		// trial over several goroutines) uses the kept buffers: a push
		// allocates nothing.
		defer t.taken.Store(false)
		if len(t.buf) < need {
			t.buf = make([]float32, need)
		}
		if cap(t.views) < len(state) {
			t.views = make([][]float32, len(state))
		}
		buf, views = t.buf, t.views[:len(state)]
		defer clear(views)
	} else {
		buf, views = make([]float32, need), make([][]float32, len(state))
	}
	for lo := 0; lo < len(param); lo += chunk {
		if t.bad.Load() {
			return
		}
		hi := min(lo+chunk, len(param))
		val := buf[:hi-lo]
		copy(val, param[lo:hi])
		for j := range views {
			views[j] = buf[(j+1)*chunk : (j+1)*chunk+hi-lo]
			copy(views[j], state[j][lo:hi])
		}
		t.Rule.Update(val, grad[lo:hi], views, step)
		ok := format.AllFinite(val)
		for _, sv := range views {
			ok = ok && format.AllFinite(sv)
		}
		if !ok {
			t.bad.Store(true)
			return
		}
	}
}
