package mlp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// to32 rounds a float64 net to the float32 one the model computes with, and
// the net back into w64, so that both hold the same values.
func to32(w64 *weights64) *weights {
	w := newWeights(w64.hidden)
	for v, s := range w64.slices() {
		for i, x := range s {
			w.slices()[v][i] = float32(x)
			s[i] = float64(float32(x))
		}
	}
	return w
}

// examples32 rounds the examples of a float64 workspace to float32 ones,
// and those back.
func examples32(ws64 *workspace64, n, hidden int) *workspace {
	ws := newWorkspace(n, hidden)
	for i := range n * inputs {
		ws.x[i] = float32(ws64.x[i])
		ws64.x[i] = float64(ws.x[i])
	}
	return ws
}

// The float32 gradients of a 784→100→10 net at MNIST-like scale on a batch
// of 100 agree with the float64 code's (the model's arithmetic before it
// moved to float32) at the same weights and examples: to float32 rounding
// of the sums, normwise and element by element.
func TestFloat32GradientsMatchFloat64(t *testing.T) {
	const hidden, n = 100, 100
	rng := rand.New(rand.NewPCG(5, 6))
	w64 := randomWeights(rng, hidden, 0.05)
	ws64 := newWorkspace64(n, hidden)
	labels := randomExamples(rng, ws64, n)
	w, ws := to32(w64), examples32(ws64, n, hidden)

	g64, g := newWeights64(hidden), newWeights(hidden)
	loss64 := ws64.lossGrad(w64, labels, n, g64)
	loss := ws.lossGrad(w, labels, n, g)
	if rel := math.Abs(loss-loss64) / loss64; rel > 1e-6 {
		t.Errorf("loss %v, float64 %v (relative difference %.2g)", loss, loss64, rel)
	}
	names := []string{HidW, HidB, SmW, SmB}
	for v, want := range g64.slices() {
		got := g.slices()[v]
		var diff, norm, top float64
		for i := range want {
			d := float64(got[i]) - want[i]
			diff += d * d
			norm += want[i] * want[i]
			top = max(top, math.Abs(want[i]))
		}
		for i := range want {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*top {
				t.Fatalf("%s[%d] = %v, float64 %v (difference %.2g of the largest %.2g)", names[v], i, got[i], want[i], d, top)
			}
		}
		if rel := math.Sqrt(diff / norm); rel > 1e-5 {
			t.Errorf("%s: relative normwise difference %.2g from float64, want < 1e-5", names[v], rel)
		} else {
			t.Logf("%s: relative normwise difference %.2g from float64", names[v], rel)
		}
	}
}

// The float32 gradient of every weight of a 784→5→10 net agrees with
// central differences of the loss computed in float64 (the reference) at
// the same float32 weights.
func TestGradientFiniteDifferences32(t *testing.T) {
	const (
		hidden = 5
		n      = 4
		step   = 1e-5
		tol    = 1e-4
	)
	rng := rand.New(rand.NewPCG(1, 2))
	w64 := randomWeights(rng, hidden, 0.1)
	ws64 := newWorkspace64(n, hidden)
	labels := randomExamples(rng, ws64, n)
	w, ws := to32(w64), examples32(ws64, n, hidden)
	if _, minPre := referenceLoss(w64, ws64.x, labels); minPre < 100*step {
		t.Fatalf("a pre-activation is %g from the ReLU kink: pick another seed", minPre)
	}
	g := newWeights(hidden)
	ws.lossGrad(w, labels, n, g)

	lossAt := func() float64 {
		s, _ := ws64.forward(w64, labels, n)
		return s / n
	}
	names := []string{HidW, HidB, SmW, SmB}
	var worst float64
	for v, s := range w64.slices() {
		grad := g.slices()[v]
		var top float64
		for _, x := range grad {
			top = max(top, math.Abs(float64(x)))
		}
		for i := range s {
			orig := s[i]
			s[i] = orig + step
			up := lossAt()
			s[i] = orig - step
			down := lossAt()
			s[i] = orig
			fd := (up - down) / (2 * step)
			// Relative to the element, or for the smallest ones to the
			// variable's largest: float32 sums carry ~1e-7 of it.
			rel := math.Abs(fd-float64(grad[i])) / max(math.Abs(fd), 1e-3*top, 1e-7)
			worst = max(worst, rel)
			if rel > tol {
				t.Errorf("%s[%d]: gradient %.8g, finite difference %.8g (relative error %.2g)", names[v], i, grad[i], fd, rel)
			}
		}
	}
	t.Logf("worst relative error over %d weights: %.2g", 784*hidden+hidden+hidden*classes+classes, worst)
}

// The float32 forward pass of a wider net gives the plain loops' loss and
// the float64 code's accuracy count.
func TestForward32MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w64 := randomWeights(rng, 70, 0.05)
	ws64 := newWorkspace64(33, 70)
	labels := randomExamples(rng, ws64, 33)
	w, ws := to32(w64), examples32(ws64, 33, 70)
	ref, _ := referenceLoss(w64, ws64.x, labels)
	sum, correct := ws.forward(w, ws.x, labels, 33)
	if math.Abs(sum/33-ref) > 1e-6*ref {
		t.Errorf("loss %v, reference %v", sum/33, ref)
	}
	_, want := ws64.forward(w64, labels, 33)
	if correct != want {
		t.Errorf("forward counts %d correct, float64 %d", correct, want)
	}
	for r := range 33 {
		var s float64
		for _, p := range ws.logits[r*classes : (r+1)*classes] {
			s += float64(p)
		}
		if math.Abs(s-1) > 1e-6 {
			t.Fatalf("row %d: probabilities sum to %v", r, s)
		}
	}
}
