// Package metrics scores binary classifiers: log loss, accuracy and the
// exact area under the ROC curve, over slices or through an Accumulator
// that gathers predictions as they come (and merges the parts of several
// workers).
//
// Labels are float32 as in sparsedata.Example: a label > 0.5 is positive.
// Probabilities and scores are float64. The functions panic if the labels
// and scores differ in length, like a slice index out of range: that is a
// bug in the caller, not bad data.
package metrics

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// LogLossEpsilon is the least probability the log loss gives the true
// class, so that a confident mistake costs -ln(1e-15) ≈ 34.5 rather than
// +Inf.
const LogLossEpsilon = 1e-15

func checkLen(nl, np int) {
	if nl != np {
		panic(fmt.Sprintf("metrics: %d labels but %d predictions", nl, np))
	}
}

func positive(label float32) bool { return label > 0.5 }

// PointLogLoss is the log loss of one prediction: -ln(q) where q, the
// probability given to the true class (p for a positive label, 1-p for a
// negative one), is clipped to [LogLossEpsilon, 1].
func PointLogLoss(label float32, p float64) float64 {
	q := p
	if !positive(label) {
		q = 1 - p
	}
	return -math.Log(min(max(q, LogLossEpsilon), 1))
}

// LogLoss is the mean PointLogLoss; NaN for no examples.
func LogLoss(labels []float32, probs []float64) float64 {
	checkLen(len(labels), len(probs))
	s := 0.0
	for i, y := range labels {
		s += PointLogLoss(y, probs[i])
	}
	return s / float64(len(labels))
}

// Accuracy is the fraction of examples with p > 0.5 exactly when the label
// is positive (p == 0.5 predicts negative); NaN for no examples.
func Accuracy(labels []float32, probs []float64) float64 {
	checkLen(len(labels), len(probs))
	right := 0
	for i, y := range labels {
		if (probs[i] > 0.5) == positive(y) {
			right++
		}
	}
	return float64(right) / float64(len(labels))
}

// AUC is the area under the ROC curve of scores (any monotone score: a
// probability, a logit): the probability that a random positive scores
// above a random negative, ties counting one half (the Mann-Whitney U
// statistic with average ranks). It sorts a copy, O(n log n). It is NaN when
// either class is absent. NaN scores rank below every number.
func AUC(labels []float32, scores []float64) float64 {
	checkLen(len(labels), len(scores))
	ps := make([]scored, len(labels))
	for i, y := range labels {
		ps[i] = scored{scores[i], positive(y)}
	}
	return aucSorted(ps)
}

type scored struct {
	score float64
	pos   bool
}

// aucSorted sorts ps by score and computes the AUC. Going up the scores,
// every positive beats the negatives below its tie group and ties with
// those in it; the sum is kept doubled in an integer so it is exact.
func aucSorted(ps []scored) float64 {
	slices.SortFunc(ps, func(a, b scored) int { return cmp.Compare(a.score, b.score) })
	var negBelow, nPos, twiceU uint64
	for i := 0; i < len(ps); {
		j := i
		var pg, ng uint64
		for ; j < len(ps) && cmp.Compare(ps[j].score, ps[i].score) == 0; j++ {
			if ps[j].pos {
				pg++
			} else {
				ng++
			}
		}
		twiceU += 2*pg*negBelow + pg*ng
		negBelow += ng
		nPos += pg
		i = j
	}
	if nPos == 0 || negBelow == 0 {
		return math.NaN()
	}
	return float64(twiceU) / 2 / (float64(nPos) * float64(negBelow))
}

// Accumulator gathers predictions for LogLoss, Accuracy and AUC. It keeps
// every (probability, label) pair for the exact AUC: 16 bytes per example.
// The zero Accumulator is empty and ready. It is not safe for concurrent
// use; give each goroutine its own and Merge them.
type Accumulator struct {
	ps      []scored
	logLoss float64 // sum of PointLogLoss
	right   int64   // correct at threshold 0.5
}

// Add records one prediction: probability p for an example with label y.
func (a *Accumulator) Add(y float32, p float64) {
	a.ps = append(a.ps, scored{p, positive(y)})
	a.logLoss += PointLogLoss(y, p)
	if (p > 0.5) == positive(y) {
		a.right++
	}
}

// Merge adds b's predictions to a.
func (a *Accumulator) Merge(b *Accumulator) {
	a.ps = append(a.ps, b.ps...)
	a.logLoss += b.logLoss
	a.right += b.right
}

// Reset empties a, keeping its memory.
func (a *Accumulator) Reset() { *a = Accumulator{ps: a.ps[:0]} }

// N is the number of predictions added.
func (a *Accumulator) N() int { return len(a.ps) }

// LogLoss is the mean log loss; NaN when empty.
func (a *Accumulator) LogLoss() float64 { return a.logLoss / float64(len(a.ps)) }

// Accuracy is the fraction correct at threshold 0.5; NaN when empty.
func (a *Accumulator) Accuracy() float64 { return float64(a.right) / float64(len(a.ps)) }

// AUC is the exact AUC of the predictions so far (see AUC). It sorts a's
// pairs in place, O(n log n); adding more afterwards is fine.
func (a *Accumulator) AUC() float64 { return aucSorted(a.ps) }
