package paramserv_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

	"github.com/paramserv/paramserv"
)

// itemScores learns a score per item id, a row of one float in a sparse
// table on the ps, and a dense offset: the rating of item k is w[k] + b,
// fitted by least squares to ratings planted as k/10 + 3 (an example
// without an item pins b).
type itemScores struct {
	n    int
	keys [2][]uint64 // the last two batches' keys: NextBatch's contract
	// Evaluated scores, by item.
	scores map[uint64]float32
}

func (*itemScores) Variables() []paramserv.Variable {
	return []paramserv.Variable{{Name: "offset", Shape: []int{1}}}
}

func (*itemScores) Tables() []paramserv.Table {
	return []paramserv.Table{{Name: "item", Dim: 1}} // rows start at zero
}

func (*itemScores) Init(int64) paramserv.Params { return paramserv.Params{"offset": {0}} }

// NextBatch: every item once (a real model reads its data here).
func (m *itemScores) NextBatch() ([][]uint64, error) {
	m.n++
	k := m.keys[m.n%2][:0]
	for id := uint64(1); id <= 5; id++ {
		k = append(k, id)
	}
	m.keys[m.n%2] = k
	return [][]uint64{k}, nil
}

func (m *itemScores) SparseGradients(p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	return m.gradients(m.keys[m.n%2], p, g, rows, rowGrads)
}

// gradients computes the batch of keys.
func (m *itemScores) gradients(keys []uint64, p, g paramserv.Params, rows, rowGrads [][]float32) (float64, error) {
	b := p["offset"][0]
	e := b - 3 // the example without an item
	loss, gb := e*e, e
	for i, k := range keys {
		e := rows[0][i] + b - (float32(k)/10 + 3)
		loss += e * e
		rowGrads[0][i] = e
		gb += e
	}
	g["offset"][0] = gb / 6
	return float64(loss) / 6, nil
}

func (m *itemScores) EvaluateSparse(p paramserv.Params, lookup func(int, []uint64, []float32) error) (map[string]float64, error) {
	keys, out := []uint64{1, 5}, make([]float32, 2)
	if err := lookup(0, keys, out); err != nil {
		return nil, err
	}
	m.scores = map[uint64]float32{1: out[0] + p["offset"][0], 5: out[1] + p["offset"][0]}
	return map[string]float64{"offset": float64(p["offset"][0])}, nil
}

func (*itemScores) Progress(local, global int64, p paramserv.Params, loss float64) string {
	return fmt.Sprintf("step %d: loss %.4f", global, loss)
}

// A sparse model is trained through SparseGradients and EvaluateSparse.
func (*itemScores) ComputeGradients(paramserv.Params, paramserv.Params) (float64, error) {
	return 0, errors.New("sparse")
}

func (*itemScores) Evaluate(paramserv.Params) (map[string]float64, error) {
	return nil, errors.New("sparse")
}

// A model with a sparse table, trained by Run: each step pulls the offset
// and the rows of the batch's items, and pushes their gradients. Both
// tasks run in this process here, as in ExampleRun.
func ExampleSparseModel() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	go paramserv.ServePS(context.Background(), paramserv.PSConfig{
		TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
		Listen:   func(string) (net.Listener, error) { return lis, nil },
	})
	m := &itemScores{}
	err = paramserv.Run(context.Background(), paramserv.RunConfig{
		TFConfig:   `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Name:       "item_scores",
		NewModel:   func(paramserv.ModelConfig) (paramserv.Model, error) { return m, nil },
		Optimizer:  paramserv.Optimizer{Name: "sgd", LearningRate: 0.5},
		Sync:       true,
		TrainSteps: 300,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("item 1: %.2f, item 5: %.2f\n", m.scores[1], m.scores[5])
	// Output:
	// item 1: 3.10, item 5: 3.50
}
