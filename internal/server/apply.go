package server

import (
	"fmt"
	"runtime"

	"github.com/paramserv/paramserv/internal/optim"
)

// update applies one dense gradient to v with the rule, spread over the
// cores for a large variable (optim.ApplyParallel: bit for bit one Update;
// a worker waiting for its reply leaves them idle meanwhile). If replies in
// flight still read v's values, it updates a copy (writable). Call with mu
// held.
func (s *Server) update(v *denseVar, grad []float32) {
	v.updates++
	v.writable()
	optim.ApplyParallel(s.rule, v.value, grad, v.state, v.updates, runtime.GOMAXPROCS(0))
}

// push applies an asynchronous step's gradient to the table's rows, through
// the remembered rows of its key set where it has one.
func (g sparseGrad) push(step int64) {
	if g.set == nil {
		g.table.push(g.keys, g.values, step)
		return
	}
	// The push was checked; the table can only refuse a malformed one.
	if err := g.table.t.PushSet(g.set, g.values, step); err != nil {
		panic(fmt.Sprintf("server: checked push refused by table %q: %v", g.table.name, err))
	}
}
