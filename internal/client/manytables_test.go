package client

import (
	"fmt"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// A request may name more key sets than a connection has cache slots (a
// model with a table per feature field pulls 26 at once): the sets beyond
// the slots go inline. Once this panicked (a negative shift) choosing a
// slot when every one was named by the request already.
func TestRequestOfMoreTablesThanCacheSlots(t *testing.T) {
	vars := []model.Variable{{Name: "b", Shape: []int{1}}}
	var tables []model.Table
	for f := range 20 {
		tables = append(tables, model.Table{Name: fmt.Sprintf("field%02d", f), Dim: 2})
	}
	for _, numPS := range []int{1, 2} {
		t.Run(fmt.Sprintf("ps=%d", numPS), func(t *testing.T) {
			tw := newTwin(t, numPS, vars, tables, InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5}, NumWorkers: 1})
			rows := func(grads bool) []Rows {
				var rs []Rows
				for f, tb := range tables {
					keys := []uint64{uint64(f + 1), uint64(100 + f), 7}
					v := make([]float32, len(keys)*tb.Dim)
					if grads {
						for i := range v {
							v[i] = float32(f + i)
						}
					}
					rs = append(rs, Rows{Table: tb.Name, Keys: keys, Values: v})
				}
				return rs
			}
			for i := range 3 { // the same key sets again: some kept, the rest inline
				tw.do(t, fmt.Sprintf("pull %d", i), func() *Request { return &Request{Pull: true, SparseParams: rows(false)} })
				tw.do(t, fmt.Sprintf("push+pull %d", i), func() *Request {
					return &Request{Push: true, Pull: true, SparseGrads: rows(true), SparseParams: rows(false)}
				})
			}
		})
	}
}
