package mlp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paramserv/paramserv/internal/data/mnist"
)

// randomWeights fills a float64 net with normal weights of the given scale
// and small random biases.
func randomWeights(rng *rand.Rand, hidden int, scale float64) *weights64 {
	w := newWeights64(hidden)
	for _, s := range w.slices() {
		for i := range s {
			s[i] = rng.NormFloat64() * scale
		}
	}
	return w
}

// randomExamples fills rows of ws.x with MNIST-like pixels (most zero) and
// returns random labels.
func randomExamples(rng *rand.Rand, ws *workspace64, n int) []uint8 {
	labels := make([]uint8, n)
	for r := range n {
		for j := range inputs {
			if rng.Float64() < 0.3 {
				ws.x[r*inputs+j] = rng.Float64()
			} else {
				ws.x[r*inputs+j] = 0
			}
		}
		labels[r] = uint8(rng.IntN(classes))
	}
	return labels
}

// referenceLoss is the mean cross-entropy written as plain loops, to check
// the BLAS calls against; it also returns the smallest |pre-activation|.
func referenceLoss(w *weights64, x []float64, labels []uint8) (loss, minPre float64) {
	H := w.hidden
	minPre = math.Inf(1)
	for r, y := range labels {
		h := make([]float64, H)
		for j := range H {
			s := w.hidB[j]
			for i := range inputs {
				s += x[r*inputs+i] * w.hidW[i*H+j]
			}
			minPre = min(minPre, math.Abs(s))
			h[j] = max(s, 0)
		}
		z := make([]float64, classes)
		top := math.Inf(-1)
		for k := range classes {
			z[k] = w.smB[k]
			for j := range H {
				z[k] += h[j] * w.smW[j*classes+k]
			}
			top = max(top, z[k])
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(v - top)
		}
		loss += math.Log(sum) + top - z[y]
	}
	return loss / float64(len(labels)), minPre
}

// TestGradientFiniteDifferences64 checks the gradient of every weight of a
// 784→5→10 net on a few examples against central differences, in the
// float64 reference.
func TestGradientFiniteDifferences64(t *testing.T) {
	const (
		hidden = 5
		n      = 4
		step   = 1e-5
		tol    = 1e-4
	)
	rng := rand.New(rand.NewPCG(1, 2))
	w := randomWeights(rng, hidden, 0.1)
	ws := newWorkspace64(n+3, hidden) // room to spare: only n rows count
	labels := randomExamples(rng, ws, n)

	ref, minPre := referenceLoss(w, ws.x, labels)
	// A pre-activation within one step of the ReLU's kink would make the
	// differences meaningless: the fixed seed keeps them clear of it.
	if minPre < 100*step {
		t.Fatalf("a pre-activation is %g from the ReLU kink: pick another seed", minPre)
	}
	g := newWeights64(hidden)
	loss := ws.lossGrad(w, labels, n, g)
	if math.Abs(loss-ref) > 1e-12*math.Abs(ref) {
		t.Fatalf("loss %v, reference loop gives %v", loss, ref)
	}

	lossAt := func() float64 {
		s, _ := ws.forward(w, labels, n)
		return s / n
	}
	names := []string{HidW, HidB, SmW, SmB}
	var worst float64
	for v, ws := range w.slices() {
		grad := g.slices()[v]
		for i := range ws {
			orig := ws[i]
			ws[i] = orig + step
			up := lossAt()
			ws[i] = orig - step
			down := lossAt()
			ws[i] = orig
			fd := (up - down) / (2 * step)
			rel := math.Abs(fd-grad[i]) / max(math.Abs(fd), math.Abs(grad[i]), 1e-7)
			worst = max(worst, rel)
			if rel > tol {
				t.Errorf("%s[%d]: gradient %.10g, finite difference %.10g (relative error %.2g)", names[v], i, grad[i], fd, rel)
			}
		}
	}
	t.Logf("worst relative error over %d weights: %.2g", 784*hidden+hidden+hidden*classes+classes, worst)
}

// TestForwardMatchesReference64 checks the float64 reference's batched
// forward pass of a wider net and its accuracy count against the plain loops.
func TestForwardMatchesReference64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := randomWeights(rng, 70, 0.05)
	ws := newWorkspace64(33, 70)
	labels := randomExamples(rng, ws, 33)
	ref, _ := referenceLoss(w, ws.x, labels)
	sum, correct := ws.forward(w, labels, 33)
	if math.Abs(sum/33-ref) > 1e-12*ref {
		t.Errorf("loss %v, reference %v", sum/33, ref)
	}
	// The probabilities now in ws.logits sum to one; the count of correct
	// argmaxes agrees with them.
	c := 0
	for r := range 33 {
		row := ws.logits[r*classes : (r+1)*classes]
		var s float64
		best := 0
		for k, p := range row {
			s += p
			if p > row[best] {
				best = k
			}
		}
		if math.Abs(s-1) > 1e-12 {
			t.Fatalf("row %d: probabilities sum to %v", r, s)
		}
		if best == int(labels[r]) {
			c++
		}
	}
	if c != correct {
		t.Errorf("forward counts %d correct, probabilities say %d", correct, c)
	}
}

func TestInit(t *testing.T) {
	const hidden = 1000
	p := Init(hidden, 7)
	// A normal truncated at ±2σ has standard deviation σ·0.87962.
	const shrink = 0.8796256610342398
	for _, tt := range []struct {
		name   string
		stddev float64
	}{{HidW, 1.0 / 28}, {SmW, 1 / math.Sqrt(hidden)}} {
		v := p[tt.name]
		var sum, sq float64
		var beyond19 int
		for _, x := range v {
			if math.Abs(float64(x)) > 2*tt.stddev*(1+1e-6) {
				t.Fatalf("%s: %g beyond 2 standard deviations (%g)", tt.name, x, 2*tt.stddev)
			}
			if math.Abs(float64(x)) > 1.9*tt.stddev {
				beyond19++
			}
			sum += float64(x)
			sq += float64(x) * float64(x)
		}
		n := float64(len(v))
		mean := sum / n
		std := math.Sqrt(sq/n - mean*mean)
		want := tt.stddev * shrink
		// 5 standard errors of each estimate.
		if math.Abs(mean) > 5*want/math.Sqrt(n) {
			t.Errorf("%s: mean %g, want 0", tt.name, mean)
		}
		if math.Abs(std-want) > 5*want/math.Sqrt(2*n) {
			t.Errorf("%s: standard deviation %g, want %g (truncated normal of σ %g)", tt.name, std, want, tt.stddev)
		}
		// About 1% of a ±2σ truncated normal lies beyond 1.9σ: the tails
		// are redrawn, not clipped (which would pile values at 2σ) or cut short.
		if frac := float64(beyond19) / n; frac < 0.005 || frac > 0.02 {
			t.Errorf("%s: %.3f%% beyond 1.9σ, want about 1%%", tt.name, 100*frac)
		}
	}
	for _, b := range []string{HidB, SmB} {
		for _, x := range p[b] {
			if x != 0 {
				t.Fatalf("%s not zero", b)
			}
		}
	}
	q, r := Init(hidden, 7), Init(hidden, 8)
	if q[HidW][12345] != p[HidW][12345] || q[SmW][999] != p[SmW][999] {
		t.Error("same seed, different values")
	}
	if r[HidW][12345] == p[HidW][12345] {
		t.Error("different seeds, same values")
	}
}

// synthetic returns a small dataset of random MNIST-like examples.
func synthetic(seed uint64) *mnist.Data {
	rng := rand.New(rand.NewPCG(seed, 0))
	set := func(n int) *mnist.Set {
		s := &mnist.Set{Images: make([]float32, n*inputs), Labels: make([]uint8, n)}
		for i := range s.Images {
			if rng.Float64() < 0.3 {
				s.Images[i] = float32(rng.Float64())
			}
		}
		for i := range s.Labels {
			s.Labels[i] = uint8(rng.IntN(classes))
		}
		return s
	}
	return &mnist.Data{Train: set(60), Validation: set(20), Test: set(30)}
}
