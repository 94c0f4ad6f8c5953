package sparselr

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/paramserv/paramserv/internal/metrics"
	"github.com/paramserv/paramserv/internal/model"
)

func newModel(t *testing.T, lines string, batch int) *Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(model.Config{TrainData: path, BatchSize: batch, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// summedLoss is the batch's summed log loss at the given weights.
func summedLoss(m *Model, bias float64, w []float32) float64 {
	var loss float64
	s := 0
	for e := range m.size(&m.cur) {
		ex := m.at(&m.cur, e)
		z := bias
		for j := range ex.Keys {
			z += float64(w[m.cur.slots[s+j]]) * float64(ex.Vals[j])
		}
		loss += metrics.PointLogLoss(ex.Label, sigmoid(z))
		s += len(ex.Keys)
	}
	return loss
}

// The pushed gradients are those of the batch's summed log loss, checked
// against central finite differences for every touched row and the bias.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	m := newModel(t, "+1 1:0.5 3:1 7:2\n-1 2:1 3:0.25\n+1 1:1 2:1 9:1\n-1 7:0.5 9:3\n", 4)
	keys, err := m.NextBatch()
	if err != nil {
		t.Fatal(err)
	}
	n := len(keys[0])
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i%3) * 0.3
	}
	params := model.Params{Bias: {0.1}}
	grads := model.Params{Bias: {0}}
	gw := make([]float32, n)
	if _, err := m.SparseGradients(params, grads, [][]float32{w}, [][]float32{gw}); err != nil {
		t.Fatal(err)
	}
	const h = 1e-3
	for i := range w {
		orig := w[i]
		w[i] = orig + h
		up := summedLoss(m, 0.1, w)
		w[i] = orig - h
		down := summedLoss(m, 0.1, w)
		w[i] = orig
		if fd := (up - down) / (2 * h); math.Abs(fd-float64(gw[i])) > 1e-3 {
			t.Errorf("key %d: gradient %v, finite difference %v", keys[0][i], gw[i], fd)
		}
	}
	if fd := (summedLoss(m, 0.1+h, w) - summedLoss(m, 0.1-h, w)) / (2 * h); math.Abs(fd-float64(grads[Bias][0])) > 1e-3 {
		t.Errorf("bias: gradient %v, finite difference %v", grads[Bias][0], fd)
	}
}

// NextBatch returns each touched key once, and the previous batch's keys
// stay valid for the trainer's push while the next batch is read.
func TestNextBatchKeysDistinctAndDoubleBuffered(t *testing.T) {
	m := newModel(t, "+1 1:1 2:1\n-1 2:1 3:1\n+1 3:1 4:1\n-1 4:1 5:1\n", 2)
	first, _ := m.NextBatch()
	keep := append([]uint64(nil), first[0]...)
	seen := map[uint64]bool{}
	for _, k := range first[0] {
		if seen[k] {
			t.Fatalf("key %d twice in one batch", k)
		}
		seen[k] = true
	}
	if _, err := m.NextBatch(); err != nil {
		t.Fatal(err)
	}
	for i, k := range keep {
		if m.prev.keys[i] != k {
			t.Fatalf("the previous batch's keys changed when the next was read")
		}
	}
}

// EndTraining drops the training set only when the evaluation scores
// --test_data instead; the model is then evaluated as before and reads no
// more batches.
func TestEndTrainingKeepsWhatTheEvaluationReads(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	if err := os.WriteFile(train, []byte("+1 1:1 2:1\n-1 2:1 3:1\n+1 3:1 4:1\n-1 4:1 5:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(test, []byte("+1 1:1 4:1\n-1 3:1 5:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lookup := func(_ int, keys []uint64, out []float32) error {
		for i, k := range keys {
			out[i] = float32(k) * 0.1
		}
		return nil
	}
	params := model.Params{Bias: {0.2}}
	for _, withTest := range []bool{false, true} {
		cfg := model.Config{TrainData: train, BatchSize: 2, Seed: 1}
		if withTest {
			cfg.TestData = test
		}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.NextBatch(); err != nil {
			t.Fatal(err)
		}
		want, err := m.EvaluateSparse(params, lookup)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.EndTraining(); got != withTest {
			t.Errorf("with test data %v: EndTraining() = %v", withTest, got)
		}
		if withTest && m.train != nil {
			t.Error("EndTraining kept the training set")
		}
		if _, err := m.NextBatch(); withTest && err != model.ErrEndOfData {
			t.Errorf("NextBatch after EndTraining: %v, want ErrEndOfData", err)
		}
		got, err := m.EvaluateSparse(params, lookup)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("with test data %v: %s %v after EndTraining, %v before", withTest, k, got[k], v)
			}
		}
	}
}
