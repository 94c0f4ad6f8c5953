package paramserv_test

import (
	"context"
	"fmt"
	"log"

	"github.com/paramserv/paramserv"
)

// linReg is a model of one's own: y = 2x + 10 fitted by least squares on a
// fixed batch, its two variables on the ps.
type linReg struct{ final map[string]float64 }

func (*linReg) Variables() []paramserv.Variable {
	return []paramserv.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}}
}

func (*linReg) Init(int64) paramserv.Params { return paramserv.Params{"weight": {0}, "bias": {0}} }

func (*linReg) ComputeGradients(p, g paramserv.Params) (float64, error) {
	var loss float64
	g["weight"][0], g["bias"][0] = 0, 0
	for _, x := range []float32{-1, -0.5, 0, 0.5, 1} {
		e := p["weight"][0]*x + p["bias"][0] - (2*x + 10)
		g["weight"][0] += 2 * e * x / 5
		g["bias"][0] += 2 * e / 5
		loss += float64(e*e) / 5
	}
	return loss, nil
}

func (*linReg) Progress(local, global int64, p paramserv.Params, loss float64) string {
	return fmt.Sprintf("step %d: weight %.3f, bias %.3f, loss %.4f", global, p["weight"][0], p["bias"][0], loss)
}

func (m *linReg) Evaluate(p paramserv.Params) (map[string]float64, error) {
	m.final = map[string]float64{"weight": float64(p["weight"][0]), "bias": float64(p["bias"][0])}
	return m.final, nil
}

// Run trains a model of one's own with the built-in loop. Both tasks run in
// this process here; a job runs each as its own process (every task the
// same program, TF_CONFIG telling it which task it is).
func ExampleRun() {
	addr := freeLoopbackAddr() // each task's host:port in a real job
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, addr)
	m := &linReg{}
	cfg := paramserv.RunConfig{
		Name:       "linreg",
		NewModel:   func(paramserv.ModelConfig) (paramserv.Model, error) { return m, nil },
		Optimizer:  paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		Sync:       true,
		TrainSteps: 500,
	}
	ps := cfg
	ps.TFConfig = `{` + cluster + `,"task":{"type":"ps","index":0}}`
	psDone := make(chan error, 1)
	go func() { psDone <- paramserv.Run(context.Background(), ps) }()

	cfg.TFConfig = `{` + cluster + `,"task":{"type":"worker","index":0}}`
	if err := paramserv.Run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("weight %.2f, bias %.2f\n", m.final["weight"], m.final["bias"])
	fmt.Println("ps:", <-psDone)
	// Output:
	// weight 2.00, bias 10.00
	// ps: <nil>
}
