package shard

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// BenchmarkDenseApply measures the update of a dense variable alone
// (update), the check that the update leaves every value finite (check: the
// rule's bounds, bound.go), the same check by a trial update on copies
// (trial: what a rule without bounds costs), and an asynchronous push's
// whole Apply, which checks and updates (apply).
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
			for _, sub := range []string{"check", "trial"} {
				b.Run(fmt.Sprintf("%s/%dK/%s", rule, n>>10, sub), func(b *testing.B) {
					b.SetBytes(int64(4 * n))
					if sub == "trial" {
						defer func(r int64) { v.bndRetry = r }(v.bndRetry)
						v.bndRetry = math.MaxInt64
					}
					for b.Loop() {
						if sub == "trial" {
							v.bnd.ok = false
						}
						if err := s.checkResult(v, g, 0, v.updates+1, 0); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
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
