package paramserv_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/paramserv/paramserv"
)

// itemScoresAhead is itemScores that can compute the batch before its last
// one: it already keeps the last two batches (NextBatch's contract), so
// PrevSparseGradients computes from the other one.
type itemScoresAhead struct{ *itemScores }

func (m itemScoresAhead) PrevSparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.gradients(m.keys[(m.n-1)%2], p, g, rows, rowGrads)
}

// A SparseModel that also implements SparseReadAhead trains with its
// round trips overlapped with its compute: with one asynchronous worker,
// the rows of the next batch travel while the worker computes this one.
func ExampleSparseReadAhead() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	go paramserv.ServePS(context.Background(), paramserv.PSConfig{
		TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
		Listen:   func(string) (net.Listener, error) { return lis, nil },
	})
	m := itemScoresAhead{&itemScores{}}
	err = paramserv.Run(context.Background(), paramserv.RunConfig{
		TFConfig:   `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Name:       "item_scores",
		NewModel:   func(paramserv.ModelConfig) (paramserv.Model, error) { return m, nil },
		Optimizer:  paramserv.Optimizer{Name: "sgd", LearningRate: 0.5},
		TrainSteps: 300, // asynchronous: Sync is false
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("item 1: %.2f, item 5: %.2f\n", m.scores[1], m.scores[5])
	// Output:
	// item 1: 3.10, item 5: 3.50
}
