package shard

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/wire"
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
// values and state are only read.
func (s *Shard) checkResult(v *Var, grad []float32, step int64) error {
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
		v.rule.Update(val, grad[lo:hi], views, step)
		if i := wire.FirstNonFinite(val); i >= 0 {
			return fmt.Errorf("variable %q: the update would make element %d %v (it is %v, the gradient %v); refused whole, nothing changed", v.name, lo+i, val[i], v.value[lo+i], grad[lo+i])
		}
		for j, sv := range views {
			if i := wire.FirstNonFinite(sv); i >= 0 {
				return fmt.Errorf("variable %q: the update would make %s state slot %d element %d %v (the gradient is %v); refused whole, nothing changed", v.name, v.rule.Name(), j, lo+i, sv[i], grad[lo+i])
			}
		}
	}
	return nil
}
