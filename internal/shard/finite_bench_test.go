package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// BenchmarkDenseApply measures the update of a dense variable alone
// (update), the trial that looks for values it would make not finite
// (trial), and an asynchronous push's whole Apply, which runs both (apply).
func BenchmarkDenseApply(b *testing.B) {
	for _, rule := range []string{"sgd", "adam"} {
		for _, n := range []int{1 << 18, 1 << 22} {
			s := New(Config{NumWorkers: 1})
			l := Layout{Vars: []VarSpec{{Name: "w", Shape: []int64{int64(n)}}}, Optimizer: optim.Config{Name: rule, LearningRate: 1e-3}, NumWorkers: 1}
			if _, err := s.Init(l, [][]float32{make([]float32, n)}); err != nil {
				b.Fatal(err)
			}
			g := make([]float32, n)
			for i := range g {
				g[i] = 1e-3
			}
			v := s.Var("w")
			b.Run(fmt.Sprintf("%s/%dK/update", rule, n>>10), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					s.update(v, g, nil)
				}
			})
			b.Run(fmt.Sprintf("%s/%dK/trial", rule, n>>10), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					if err := s.checkResult(v, g, v.updates+1); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/%dK/apply", rule, n>>10), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				p := &Push{Dense: []DenseGrad{{Name: []byte("w"), Values: g, Bad: -1}}}
				for b.Loop() {
					p.Step = s.Step()
					if err := s.Check(p); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
