package mlp

import (
	"fmt"
	"math"

	"github.com/paramserv/paramserv/internal/data/mnist"
	"github.com/paramserv/paramserv/internal/model"
)

const (
	inputs  = mnist.Pixels
	classes = mnist.Classes
)

// weights holds the four variables in float32, row-major: hidW is
// inputs×hidden, smW hidden×classes. The same type holds their gradients.
// The model's weights and gradients are the caller's model.Params
// themselves (bind), so nothing is converted or copied.
type weights struct {
	hidden               int
	hidW, hidB, smW, smB []float32
}

func newWeights(hidden int) *weights {
	return &weights{
		hidden: hidden,
		hidW:   make([]float32, inputs*hidden),
		hidB:   make([]float32, hidden),
		smW:    make([]float32, hidden*classes),
		smB:    make([]float32, classes),
	}
}

// slices lists the variables in the order of Variables.
func (w *weights) slices() [4][]float32 { return [4][]float32{w.hidW, w.hidB, w.smW, w.smB} }

// hiddenOf infers the hidden width of params from hid_b.
func hiddenOf(params model.Params) (int, error) {
	b, ok := params[HidB]
	if !ok || len(b) == 0 {
		return 0, fmt.Errorf("%w: %s missing or empty", ErrParams, HidB)
	}
	return len(b), nil
}

// load makes w's variables those of params (sharing their memory),
// checking every variable's size.
func (w *weights) load(params model.Params) error {
	var s [4][]float32
	for i, v := range Variables(w.hidden) {
		p, ok := params[v.Name]
		if !ok {
			return fmt.Errorf("%w: %s missing", ErrParams, v.Name)
		}
		if want := v.Size(); len(p) != want {
			return fmt.Errorf("%w: %s has %d values, want %d (shape %v)", ErrParams, v.Name, len(p), want, v.Shape)
		}
		s[i] = p
	}
	w.hidW, w.hidB, w.smW, w.smB = s[0], s[1], s[2], s[3]
	return nil
}

// bindGrads makes w's variables those of grads (sharing their memory), so
// that the backward pass writes the gradients in place, checking every
// variable's size.
func (w *weights) bindGrads(grads model.Params) error {
	var s [4][]float32
	for i, v := range Variables(w.hidden) {
		g, ok := grads[v.Name]
		if want := v.Size(); !ok || len(g) != want {
			return fmt.Errorf("%w: gradient of %s has %d values, want %d (shape %v)", ErrParams, v.Name, len(g), want, v.Shape)
		}
		s[i] = g
	}
	w.hidW, w.hidB, w.smW, w.smB = s[0], s[1], s[2], s[3]
	return nil
}

// workspace holds the activations of up to rows examples, so that the
// forward and backward passes allocate nothing. One goroutine uses it.
type workspace struct {
	rows   int
	x      []float32 // rows×inputs: a batch gathered from the training set
	h      []float32 // rows×hidden: ReLU output; its sign is the ReLU mask
	logits []float32 // rows×classes; after forward, the softmax probabilities
	dh     []float32 // rows×hidden
	s      scratch   // sgemm's
}

func newWorkspace(rows, hidden int) *workspace {
	return &workspace{
		rows:   rows,
		x:      make([]float32, rows*inputs),
		h:      make([]float32, rows*hidden),
		logits: make([]float32, rows*classes),
		dh:     make([]float32, rows*hidden),
	}
}

// gather copies the images of examples idx of set into ws.x and returns
// their labels in labels (len(idx) long).
func (ws *workspace) gather(set *mnist.Set, idx []int, labels []uint8) {
	for r, i := range idx {
		copy(ws.x[r*inputs:(r+1)*inputs], set.Image(i))
		labels[r] = set.Labels[i]
	}
}

// forward computes, for the n examples x (n×inputs), the softmax
// probabilities (left in ws.logits) and returns the summed cross-entropy and
// the number classified correctly (the first largest probability wins, as
// tf.argmax does). The matrix products are float32; the softmax and the
// loss are computed in float64.
func (ws *workspace) forward(w *weights, x []float32, labels []uint8, n int) (sumLoss float64, correct int) {
	H := w.hidden
	h, logits := ws.h[:n*H], ws.logits[:n*classes]

	sgemm(&ws.s, false, false, n, H, inputs, x[:n*inputs], inputs, w.hidW, H, h, H)
	for r := range n {
		row := h[r*H : (r+1)*H]
		for j, b := range w.hidB {
			row[j] = max(row[j]+b, 0)
		}
	}

	sgemm(&ws.s, false, false, n, classes, H, h, H, w.smW, classes, logits, classes)
	var e [classes]float64
	for r := range n {
		row := logits[r*classes : (r+1)*classes]
		best := 0
		for j, b := range w.smB {
			row[j] += b
			if row[j] > row[best] {
				best = j
			}
		}
		if best == int(labels[r]) {
			correct++
		}
		// Softmax, shifted by the largest logit; loss = log Σ e^z − z_y.
		top := float64(row[best])
		zy := float64(row[labels[r]]) - top
		var sum float64
		for j, z := range row {
			e[j] = math.Exp(float64(z) - top)
			sum += e[j]
		}
		sumLoss += math.Log(sum) - zy
		for j := range row {
			row[j] = float32(e[j] / sum)
		}
	}
	return sumLoss, correct
}

// lossGrad computes the mean cross-entropy of the first n examples in ws.x
// and writes its gradient with respect to every weight into g.
func (ws *workspace) lossGrad(w *weights, labels []uint8, n int, g *weights) float64 {
	H := w.hidden
	sumLoss, _ := ws.forward(w, ws.x, labels, n)
	x, h, p, dh := ws.x[:n*inputs], ws.h[:n*H], ws.logits[:n*classes], ws.dh[:n*H]

	// dL/dlogits = (softmax − onehot) / n, in place of the probabilities.
	inv := 1 / float32(n)
	for r := range n {
		row := p[r*classes : (r+1)*classes]
		row[labels[r]] -= 1
		for j := range row {
			row[j] *= inv
		}
	}
	// Softmax layer: dsmW = hᵀ·dlogits, dsmB = Σ_rows dlogits.
	sgemm(&ws.s, true, false, H, classes, n, h, H, p, classes, g.smW, classes)
	clear(g.smB)
	for r := range n {
		for j, d := range p[r*classes : (r+1)*classes] {
			g.smB[j] += d
		}
	}
	// Back through the ReLU: dh = (dlogits·smWᵀ) ⊙ [h > 0].
	sgemm(&ws.s, false, true, n, H, classes, p, classes, w.smW, classes, dh, H)
	clear(g.hidB)
	for r := range n {
		hrow, drow := h[r*H:(r+1)*H], dh[r*H:(r+1)*H]
		for j, a := range hrow {
			if a <= 0 {
				drow[j] = 0
			}
			g.hidB[j] += drow[j]
		}
	}
	// Hidden layer: dhidW = xᵀ·dh.
	sgemm(&ws.s, true, false, inputs, H, n, x, inputs, dh, H, g.hidW, H)
	return sumLoss / float64(n)
}
