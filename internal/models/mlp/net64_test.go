package mlp

// The float64 forward and backward passes the model computed with before
// it moved to float32 (net.go): the reference its gradients and losses are
// checked against.

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/paramserv/paramserv/internal/model"
)

// weights holds the four variables in float64, row-major: hidW is
// inputs×hidden, smW hidden×classes. The same type holds their gradients.
type weights64 struct {
	hidden               int
	hidW, hidB, smW, smB []float64
}

func newWeights64(hidden int) *weights64 {
	return &weights64{
		hidden: hidden,
		hidW:   make([]float64, inputs*hidden),
		hidB:   make([]float64, hidden),
		smW:    make([]float64, hidden*classes),
		smB:    make([]float64, classes),
	}
}

// slices lists the variables in the order of Variables.
func (w *weights64) slices() [4][]float64 { return [4][]float64{w.hidW, w.hidB, w.smW, w.smB} }

// load copies params into w, checking every variable's size.
func (w *weights64) load(params model.Params) error {
	for i, v := range Variables(w.hidden) {
		p, ok := params[v.Name]
		if !ok {
			return fmt.Errorf("%w: %s missing", ErrParams, v.Name)
		}
		dst := w.slices()[i]
		if len(p) != len(dst) {
			return fmt.Errorf("%w: %s has %d values, want %d (shape %v)", ErrParams, v.Name, len(p), len(dst), v.Shape)
		}
		for j, x := range p {
			dst[j] = float64(x)
		}
	}
	return nil
}

// workspace holds the activations of up to rows examples, so that the
// forward and backward passes allocate nothing. One goroutine uses it.
type workspace64 struct {
	rows   int
	x      []float64 // rows×inputs
	h      []float64 // rows×hidden: ReLU output; its sign is the ReLU mask
	logits []float64 // rows×classes; after forward, the softmax probabilities
	dh     []float64 // rows×hidden
}

func newWorkspace64(rows, hidden int) *workspace64 {
	return &workspace64{
		rows:   rows,
		x:      make([]float64, rows*inputs),
		h:      make([]float64, rows*hidden),
		logits: make([]float64, rows*classes),
		dh:     make([]float64, rows*hidden),
	}
}

// gemm sets c = a·b (or aᵀ·b, a·bᵀ as tA, tB say), all row-major and dense.
func gemm64(tA, tB blas.Transpose, a []float64, ar, ac int, b []float64, br, bc int, c []float64, cr, cc int) {
	blas64.Gemm(tA, tB, 1,
		blas64.General{Rows: ar, Cols: ac, Data: a, Stride: ac},
		blas64.General{Rows: br, Cols: bc, Data: b, Stride: bc},
		0,
		blas64.General{Rows: cr, Cols: cc, Data: c, Stride: cc})
}

// forward computes, for the first n examples in ws.x, the softmax
// probabilities (left in ws.logits) and returns the summed cross-entropy and
// the number classified correctly (the first largest probability wins, as
// tf.argmax does).
func (ws *workspace64) forward(w *weights64, labels []uint8, n int) (sumLoss float64, correct int) {
	H := w.hidden
	x, h, logits := ws.x[:n*inputs], ws.h[:n*H], ws.logits[:n*classes]

	gemm64(blas.NoTrans, blas.NoTrans, x, n, inputs, w.hidW, inputs, H, h, n, H)
	for r := range n {
		row := h[r*H : (r+1)*H]
		for j, b := range w.hidB {
			row[j] = max(row[j]+b, 0)
		}
	}

	gemm64(blas.NoTrans, blas.NoTrans, h, n, H, w.smW, H, classes, logits, n, classes)
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
		top := row[best]
		zy := row[labels[r]] - top
		var sum float64
		for j, z := range row {
			row[j] = math.Exp(z - top)
			sum += row[j]
		}
		sumLoss += math.Log(sum) - zy
		for j := range row {
			row[j] /= sum
		}
	}
	return sumLoss, correct
}

// lossGrad computes the mean cross-entropy of the first n examples in ws.x
// and writes its gradient with respect to every weight into g.
func (ws *workspace64) lossGrad(w *weights64, labels []uint8, n int, g *weights64) float64 {
	H := w.hidden
	sumLoss, _ := ws.forward(w, labels, n)
	x, h, p, dh := ws.x[:n*inputs], ws.h[:n*H], ws.logits[:n*classes], ws.dh[:n*H]

	// dL/dlogits = (softmax − onehot) / n, in place of the probabilities.
	inv := 1 / float64(n)
	for r := range n {
		row := p[r*classes : (r+1)*classes]
		row[labels[r]] -= 1
		for j := range row {
			row[j] *= inv
		}
	}
	// Softmax layer: dsmW = hᵀ·dlogits, dsmB = Σ_rows dlogits.
	gemm64(blas.Trans, blas.NoTrans, h, n, H, p, n, classes, g.smW, H, classes)
	clear(g.smB)
	for r := range n {
		for j, d := range p[r*classes : (r+1)*classes] {
			g.smB[j] += d
		}
	}
	// Back through the ReLU: dh = (dlogits·smWᵀ) ⊙ [h > 0].
	gemm64(blas.NoTrans, blas.Trans, p, n, classes, w.smW, H, classes, dh, n, H)
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
	gemm64(blas.Trans, blas.NoTrans, x, n, inputs, dh, n, H, g.hidW, inputs, H)
	return sumLoss * inv
}
