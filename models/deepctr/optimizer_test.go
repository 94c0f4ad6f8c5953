package deepctr

import (
	"testing"

	"github.com/paramserv/paramserv"
)

// The MLP's layers carry their own rule (Adam at 0.001 by default) and the
// wide bias the job's, as the tables; "job" gives the layers the job's.
func TestDenseLayersOwnRule(t *testing.T) {
	cfg := Config{Hidden: []int{5, 4}}.Defaults()
	m := newModel(cfg, 3)
	vs := m.variables(cfg.DenseOptimizer)
	if len(vs) != 7 {
		t.Fatalf("%d variables, want the bias and 3 layers' weights and biases", len(vs))
	}
	for _, v := range vs {
		switch {
		case v.Name == "bias" && v.Optimizer != nil:
			t.Errorf("the wide bias has its own rule %+v, want the job's", *v.Optimizer)
		case v.Name != "bias" && (v.Optimizer == nil || *v.Optimizer != paramserv.Optimizer{Name: "adam", LearningRate: 0.001}):
			t.Errorf("layer variable %s has rule %v, want adam at 0.001", v.Name, v.Optimizer)
		}
	}
	for _, v := range m.variables(paramserv.Optimizer{Name: "job"}) {
		if v.Optimizer != nil {
			t.Errorf("dense optimizer job: %s has its own rule %+v", v.Name, *v.Optimizer)
		}
	}
}
