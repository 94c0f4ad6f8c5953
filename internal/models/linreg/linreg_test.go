package linreg

import (
	"math"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

func TestGradientMatchesFiniteDifferences(t *testing.T) {
	xs := []float64{0.5, -1.2, 2.0}
	ys := []float64{11, 7.5, 14.2}
	w, b := 1.3, 9.1
	_, gw, gb := mse(w, b, xs, ys)
	const h = 1e-6
	lw1, _, _ := mse(w+h, b, xs, ys)
	lw0, _, _ := mse(w-h, b, xs, ys)
	lb1, _, _ := mse(w, b+h, xs, ys)
	lb0, _, _ := mse(w, b-h, xs, ys)
	if fd := (lw1 - lw0) / (2 * h); math.Abs(fd-gw) > 1e-6 {
		t.Errorf("d/dw = %v, finite difference %v", gw, fd)
	}
	if fd := (lb1 - lb0) / (2 * h); math.Abs(fd-gb) > 1e-6 {
		t.Errorf("d/db = %v, finite difference %v", gb, fd)
	}
}

// Plain single-process SGD must recover the planted model: the reference
// for what the cluster should reach.
func TestSingleProcessSGDConverges(t *testing.T) {
	m, err := New(model.Config{BatchSize: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Init(1)
	g := model.NewParams(m.Variables())
	for i := 0; i < 3000; i++ {
		if _, err := m.ComputeGradients(p, g); err != nil {
			t.Fatal(err)
		}
		p["weight"][0] -= 0.01 * g["weight"][0]
		p["bias"][0] -= 0.01 * g["bias"][0]
	}
	ev, _ := m.Evaluate(p)
	if math.Abs(ev["weight"]-TrueWeight) > 0.05 || math.Abs(ev["bias"]-TrueBias) > 0.1 {
		t.Fatalf("weight %.3f bias %.3f, want 2±0.05, 10±0.1", ev["weight"], ev["bias"])
	}
	if ev["loss"] > 1.2*Noise*Noise {
		t.Fatalf("validation loss %.4f, want about the noise variance %.4f", ev["loss"], Noise*Noise)
	}
}
