// Package linreg is the seeds' linear regression: data drawn as x ~ N(0,1),
// y = 2x + 10 + 0.33·N(0,1), and a model y = weight·x + bias trained on the
// mean squared error. It is the smallest model that exercises the whole
// cluster: two scalar variables, which round-robin places on two ps.
package linreg

import (
	"fmt"
	"math/rand/v2"

	"github.com/paramserv/paramserv/internal/model"
)

// The planted model and its noise.
const (
	TrueWeight = 2.0
	TrueBias   = 10.0
	Noise      = 0.33
)

const validationSize = 1000

// Model implements model.Model. Each worker draws its own stream of data.
type Model struct {
	batch  int
	rng    *rand.Rand
	xs, ys []float64 // the current batch
	valX   []float64
	valY   []float64
}

// New returns the model for one worker.
func New(cfg model.Config) (*Model, error) {
	if cfg.BatchSize <= 0 {
		return nil, fmt.Errorf("linreg: batch size must be positive, got %d", cfg.BatchSize)
	}
	m := &Model{
		batch: cfg.BatchSize,
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Worker)+1)),
		xs:    make([]float64, cfg.BatchSize),
		ys:    make([]float64, cfg.BatchSize),
	}
	// The validation set is the same on every worker.
	vr := rand.New(rand.NewPCG(uint64(cfg.Seed), 0))
	m.valX, m.valY = make([]float64, validationSize), make([]float64, validationSize)
	for i := range m.valX {
		m.valX[i], m.valY[i] = draw(vr)
	}
	return m, nil
}

func draw(r *rand.Rand) (x, y float64) {
	x = r.NormFloat64()
	return x, TrueWeight*x + TrueBias + Noise*r.NormFloat64()
}

// Variables: a scalar weight and a scalar bias.
func (m *Model) Variables() []model.Variable {
	return []model.Variable{{Name: "weight", Shape: []int{1}}, {Name: "bias", Shape: []int{1}}}
}

// Init starts both at zero, as the TensorFlow example does.
func (m *Model) Init(int64) model.Params { return model.NewParams(m.Variables()) }

// ComputeGradients draws a batch and returns the mean squared error and its
// gradient: d/dw = 2·mean((wx+b-y)·x), d/db = 2·mean(wx+b-y).
func (m *Model) ComputeGradients(params, grads model.Params) (float64, error) {
	for i := range m.xs {
		m.xs[i], m.ys[i] = draw(m.rng)
	}
	loss, gw, gb := mse(float64(params["weight"][0]), float64(params["bias"][0]), m.xs, m.ys)
	grads["weight"][0] = float32(gw)
	grads["bias"][0] = float32(gb)
	return loss, nil
}

func mse(w, b float64, xs, ys []float64) (loss, gw, gb float64) {
	n := float64(len(xs))
	for i, x := range xs {
		r := w*x + b - ys[i]
		loss += r * r
		gw += 2 * r * x
		gb += 2 * r
	}
	return loss / n, gw / n, gb / n
}

// Progress is the TensorFlow example's line.
func (m *Model) Progress(_, globalStep int64, params model.Params, loss float64) string {
	return fmt.Sprintf("step: %d, weight: %f, bias: %f, loss: %f", globalStep, params["weight"][0], params["bias"][0], loss)
}

// Evaluate reports the weight, the bias and the loss on held-out data.
func (m *Model) Evaluate(params model.Params) (map[string]float64, error) {
	w, b := float64(params["weight"][0]), float64(params["bias"][0])
	loss, _, _ := mse(w, b, m.valX, m.valY)
	return map[string]float64{"weight": w, "bias": b, "loss": loss}, nil
}
