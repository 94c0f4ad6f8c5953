package deepctr

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paramserv/paramserv"
)

// TestGradientsMatchFiniteDifferences checks the backward pass against
// the loss's finite differences, for dense weights of every layer, the
// wide weights and the embeddings.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := Config{Dim: 3, Hidden: []int{5, 4}}.Defaults()
	const fields, n = 3, 6
	m := newModel(cfg, fields)
	rng := rand.New(rand.NewPCG(1, 2))
	data := &Examples{Fields: fields}
	for i := range n {
		for f := range fields {
			k := uint64(1 + rng.IntN(3))
			if i == 2 && f == 1 {
				k = 0 // an empty field
			}
			data.Keys = append(data.Keys, k)
		}
		data.Labels = append(data.Labels, float32(i%2))
	}
	batch := []int{0, 1, 2, 3, 4, 5}
	params := m.init(3)
	for name, v := range params { // a non-zero output layer and biases
		for i := range v {
			if v[i] == 0 {
				v[i] = float32(rng.NormFloat64() * 0.3)
			}
		}
		params[name] = v
	}
	m.gather(data, batch)
	for f := range fields {
		for i := range m.rows[f].Values {
			m.rows[f].Values[i] = float32(rng.NormFloat64() * 0.5)
		}
	}
	grads := paramserv.Params{}
	for name, v := range params {
		grads[name] = make([]float32, len(v))
	}
	m.step(data, batch, params, grads)
	loss := func() float64 {
		m.forward(data, batch, params)
		var s float64
		for r, i := range batch {
			s += logLossOf(m.logit[r], float64(data.Labels[i]))
		}
		return s
	}
	check := func(what string, v []float32, i int, got float32) {
		t.Helper()
		const h = 1e-3
		old := v[i]
		v[i] = old + h
		up := loss()
		v[i] = old - h
		down := loss()
		v[i] = old
		want := (up - down) / (2 * h)
		if math.Abs(float64(got)-want) > 1e-3*max(1, math.Abs(want)) {
			t.Errorf("%s[%d]: gradient %g, finite difference %g", what, i, got, want)
		}
	}
	for name, v := range params {
		for i := range v {
			check(name, v, i, grads[name][i])
		}
	}
	rowGrads := make([][]float32, fields)
	for f := range fields {
		rowGrads[f] = append([]float32(nil), m.grads[f].Values...)
	}
	for f := range fields {
		for i := range m.rows[f].Values {
			check(tableName(f), m.rows[f].Values, i, rowGrads[f][i])
		}
	}
}
