package trainer

import (
	"testing"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
)

// One worker in synchronous mode through a real ps over loopback must give
// bit for bit what plain single-process training gives with the same rule,
// data and steps: the cluster adds no arithmetic of its own.
func TestSyncOneWorkerEqualsSingleProcess(t *testing.T) {
	for _, opt := range []string{"sgd", "adam"} {
		t.Run(opt, func(t *testing.T) {
			cfg := Config{
				Config:     lifecycle.Config{Optimizer: optim.Config{Name: opt, LearningRate: 0.05}, Sync: true},
				Model:      "linreg",
				Data:       model.Config{BatchSize: 10, Seed: 7},
				TrainSteps: 200,
			}
			r := runOneWorker(t, cfg)

			// The reference: the same model and rule, no network.
			m, _ := catalog.New("linreg", model.Config{BatchSize: 10, Seed: 7, NumWorkers: 1})
			rule, _ := optim.New(cfg.Optimizer)
			p, g := m.Init(7), model.NewParams(m.Variables())
			state := map[string][][]float32{}
			for _, v := range m.Variables() {
				state[v.Name] = make([][]float32, rule.StateSlots())
				for i := range state[v.Name] {
					state[v.Name][i] = make([]float32, v.Size())
				}
				rule.InitState(state[v.Name])
			}
			for step := int64(1); step <= 200; step++ {
				if _, err := m.ComputeGradients(p, g); err != nil {
					t.Fatal(err)
				}
				for _, v := range m.Variables() {
					rule.Update(p[v.Name], g[v.Name], state[v.Name], step)
				}
			}
			if r.GlobalStep != 200 || float32(*r.Weight) != p["weight"][0] || float32(*r.Bias) != p["bias"][0] {
				t.Fatalf("cluster: step %d weight %v bias %v; single process: weight %v bias %v",
					r.GlobalStep, float32(*r.Weight), float32(*r.Bias), p["weight"][0], p["bias"][0])
			}
		})
	}
}
