package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bruteAUC compares every positive with every negative: O(n²).
func bruteAUC(labels []float32, scores []float64) float64 {
	var num float64
	var nPos, nNeg int
	for i, yi := range labels {
		if yi <= 0.5 {
			nNeg++
			continue
		}
		nPos++
		for j, yj := range labels {
			if yj > 0.5 {
				continue
			}
			switch {
			case scores[i] > scores[j]:
				num++
			case scores[i] == scores[j]:
				num += 0.5
			}
		}
	}
	return num / float64(nPos*nNeg)
}

func randomData(r *rand.Rand, n, levels int) ([]float32, []float64) {
	labels := make([]float32, n)
	scores := make([]float64, n)
	for i := range n {
		if r.IntN(3) == 0 {
			labels[i] = 1
		}
		// Few distinct levels force many ties; the label shifts the odds.
		s := r.IntN(levels)
		if labels[i] == 1 && r.IntN(2) == 0 {
			s = min(s+1, levels-1)
		}
		scores[i] = float64(s) / float64(levels)
	}
	return labels, scores
}

func TestAUCMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 2 + r.IntN(300)
		levels := 1 + r.IntN(20)
		if trial%4 == 0 {
			levels = 1 << 30 // nearly no ties
		}
		labels, scores := randomData(r, n, levels)
		want := bruteAUC(labels, scores)
		got := AUC(labels, scores)
		if math.IsNaN(want) {
			if !math.IsNaN(got) {
				t.Fatalf("trial %d: AUC = %v, want NaN (one class)", trial, got)
			}
			continue
		}
		if math.Abs(got-want) > 1e-12 {
			t.Fatalf("trial %d (n=%d levels=%d): AUC = %.15f, brute force %.15f", trial, n, levels, got, want)
		}
	}
}

func TestAUCCases(t *testing.T) {
	for _, c := range []struct {
		labels []float32
		scores []float64
		want   float64
	}{
		{[]float32{0, 1}, []float64{0.1, 0.9}, 1},
		{[]float32{1, 0}, []float64{0.1, 0.9}, 0},
		{[]float32{1, 0}, []float64{0.5, 0.5}, 0.5},
		{[]float32{0, 0, 1, 1}, []float64{0.1, 0.4, 0.35, 0.8}, 0.75},
		{[]float32{1, 1}, []float64{0.1, 0.4}, math.NaN()},
		{nil, nil, math.NaN()},
		{[]float32{0, 1, 1}, []float64{math.NaN(), 0, math.NaN()}, 0.75},
	} {
		got := AUC(c.labels, c.scores)
		if !(got == c.want || math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("AUC(%v, %v) = %v, want %v", c.labels, c.scores, got, c.want)
		}
	}
}

func TestLogLossAndAccuracy(t *testing.T) {
	labels := []float32{1, 0, 1, 0}
	probs := []float64{0.9, 0.2, 0.4, 0.5}
	want := -(math.Log(0.9) + math.Log(0.8) + math.Log(0.4) + math.Log(0.5)) / 4
	if got := LogLoss(labels, probs); math.Abs(got-want) > 1e-15 {
		t.Errorf("LogLoss = %v, want %v", got, want)
	}
	if got := Accuracy(labels, probs); got != 0.75 {
		t.Errorf("Accuracy = %v, want 0.75 (p=0.5 predicts negative)", got)
	}
	// Clipping: a certain mistake costs -ln(1e-15), not +Inf.
	if got, want := LogLoss([]float32{1, 0}, []float64{0, 1}), -math.Log(LogLossEpsilon); math.Abs(got-want) > 1e-9 {
		t.Errorf("clipped LogLoss = %v, want %v", got, want)
	}
	if got := LogLoss([]float32{1, 0}, []float64{1, 0}); got > 1e-14 {
		t.Errorf("perfect LogLoss = %v, want ~0", got)
	}
}

func TestAccumulatorMatchesSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	labels, scores := randomData(r, 1000, 7)
	var parts [3]Accumulator
	for i := range labels {
		parts[i%3].Add(labels[i], scores[i])
	}
	var a Accumulator
	for i := range parts {
		a.Merge(&parts[i])
	}
	if a.N() != len(labels) {
		t.Fatalf("N = %d, want %d", a.N(), len(labels))
	}
	check := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("LogLoss", a.LogLoss(), LogLoss(labels, scores))
	check("Accuracy", a.Accuracy(), Accuracy(labels, scores))
	check("AUC", a.AUC(), AUC(labels, scores))
	a.Reset()
	if a.N() != 0 || !math.IsNaN(a.AUC()) {
		t.Errorf("after Reset: N = %d, AUC = %v", a.N(), a.AUC())
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("AUC with 2 labels and 1 score did not panic")
		}
	}()
	AUC([]float32{0, 1}, []float64{0.5})
}

func BenchmarkAUC(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	labels, scores := randomData(r, 1_000_000, 1<<30)
	b.ResetTimer()
	for b.Loop() {
		AUC(labels, scores)
	}
}

func ExampleAUC() {
	labels := []float32{0, 0, 1, 1}
	scores := []float64{0.1, 0.4, 0.35, 0.8}
	fmt.Printf("AUC %.2f, accuracy %.2f\n", AUC(labels, scores), Accuracy(labels, scores))
	// Output: AUC 0.75, accuracy 0.75
}
