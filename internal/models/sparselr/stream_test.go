package sparselr

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

// writeData writes n rows of 20 nonzeros each over keys below 50000.
func writeData(t *testing.T, path string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		b.WriteString([]string{"-1", "+1"}[i%2])
		k := (i * 7919) % 50000
		for j := range 20 {
			fmt.Fprintf(&b, " %d:1", k+j*50001+1)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newStreamed(t *testing.T, path string, batch, buffer int) *Model {
	t.Helper()
	m, err := New(model.Config{TrainData: path, BatchSize: batch, Seed: 1, ShuffleBuffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// A streamed model with a buffer of one row reads the file in order, pass
// after pass, and its gradients are those of the rows it read.
func TestStreamedBatchesFollowTheFile(t *testing.T) {
	lines := "+1 1:0.5 3:1 7:2\n-1 2:1 3:0.25\n+1 1:1 2:1 9:1\n-1 7:0.5 9:3\n"
	path := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newStreamed(t, path, 3, 1)
	// Rows 1-3, then 4, 1, 2 (the second pass), then 3, 4, 1.
	want := [][]uint64{{0, 2, 6, 1, 8}, {6, 8, 0, 2, 1}, {0, 1, 8, 6, 2}}
	for i, w := range want {
		keys, err := m.NextBatch()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys[0], w) {
			t.Fatalf("batch %d: keys %v; want %v (the file's rows in order, wrapping around)", i, keys[0], w)
		}
	}
	// The gradient check of the loaded model holds for a streamed batch.
	loaded := newModel(t, lines, 4)
	streamed := newStreamed(t, path, 4, 1)
	for _, mm := range []*Model{loaded, streamed} {
		keys, _ := mm.NextBatch()
		w := make([]float32, len(keys[0]))
		gw := make([]float32, len(w))
		grads := model.Params{Bias: {0}}
		loss, err := mm.SparseGradients(model.Params{Bias: {0.1}}, grads, [][]float32{w}, [][]float32{gw})
		if err != nil {
			t.Fatal(err)
		}
		if want := summedLoss(mm, 0.1, w) / 4; math.Abs(loss-want) > 1e-9 {
			t.Fatalf("loss %v, want %v", loss, want)
		}
		if math.Abs(float64(grads[Bias][0])-(-0.1)) > 0.2 {
			t.Fatalf("bias gradient %v", grads[Bias][0])
		}
	}
}

// liveHeap is the heap's live bytes after a collection (two: what the
// background reader allocates during one is counted live until the next).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// trainPeakHeap trains through two passes of a file of rows rows (zero
// weights: the ps is not what is measured) and returns the largest live
// heap seen, sampled 40 times.
func trainPeakHeap(t *testing.T, path string, rows, buffer int) uint64 {
	t.Helper()
	base := liveHeap()
	m, err := New(model.Config{TrainData: path, BatchSize: 100, Seed: 1, ShuffleBuffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var peak uint64
	var w, gw []float32
	steps := 2 * rows / 100
	for step := range steps {
		keys, err := m.NextBatch()
		if err != nil {
			t.Fatal(err)
		}
		w = slices.Grow(w[:0], len(keys[0]))[:len(keys[0])]
		gw = slices.Grow(gw[:0], len(keys[0]))[:len(keys[0])]
		if _, err := m.SparseGradients(model.Params{Bias: {0}}, model.Params{Bias: {0}}, [][]float32{w}, [][]float32{gw}); err != nil {
			t.Fatal(err)
		}
		if step%max(1, steps/40) == 0 { // 40 samples, whatever the rows

			peak = max(peak, liveHeap())
		}
	}
	return peak - min(base, peak)
}

// A streamed worker's memory does not grow with the rows: training on 10×
// the rows keeps the peak live heap within 20%, where loading the whole
// part grows it about tenfold.
func TestStreamedMemoryDoesNotGrowWithRows(t *testing.T) {
	n := 4000
	if testing.Short() {
		n = 2000
	}
	dir := t.TempDir()
	small, large := filepath.Join(dir, "small.svm"), filepath.Join(dir, "large.svm")
	writeData(t, small, n)
	writeData(t, large, 10*n)
	trainPeakHeap(t, small, n, 500) // warm up: the first run also counts one-off allocations
	// A sampled peak is noisy (what the reader allocates while a sample is
	// taken); growth with the rows shows in every try, noise not.
	for try := 1; ; try++ {
		s1, s10 := trainPeakHeap(t, small, n, 500), trainPeakHeap(t, large, 10*n, 500)
		t.Logf("streamed (buffer 500): peak live heap %d B for %d rows, %d B for %d rows", s1, n, s10, 10*n)
		if float64(s10) <= 1.2*float64(s1) {
			break
		}
		if try == 3 {
			t.Fatalf("streamed: peak live heap %d B for %d rows but %d B for %d rows (3 tries); want within 20%%", s1, n, s10, 10*n)
		}
	}
	l1, l10 := trainPeakHeap(t, small, n, 0), trainPeakHeap(t, large, 10*n, 0)
	t.Logf("loaded: peak live heap %d B for %d rows, %d B for %d rows", l1, n, l10, 10*n)
	if float64(l10) < 3*float64(l1) {
		t.Errorf("loaded: peak live heap %d B for %d rows, %d B for %d rows; the measure should see the whole part held", l1, n, l10, 10*n)
	}
}

// Evaluating a streamed model reads the training part once, in chunks, and
// gives the loaded model's figures.
func TestStreamedEvaluateMatchesLoaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.svm")
	writeData(t, path, 3000)
	lookup := func(_ int, keys []uint64, out []float32) error {
		for i, k := range keys {
			out[i] = float32(k%13)*0.01 - 0.06
		}
		return nil
	}
	loaded, err := New(model.Config{TrainData: path, BatchSize: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	streamed := newStreamed(t, path, 10, 100)
	a, err := loaded.EvaluateSparse(model.Params{Bias: {0.2}}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	b, err := streamed.EvaluateSparse(model.Params{Bias: {0.2}}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"train_log_loss", "train_accuracy", "train_auc", "train_examples"} {
		if math.Abs(a[k]-b[k]) > 1e-9 {
			t.Errorf("%s: loaded %v, streamed %v", k, a[k], b[k])
		}
	}
}

// A malformed line met while streaming stops training with its file and
// line, as the loading reader does.
func TestStreamedBadLineNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(path, []byte("+1 1:1\n-1 2:x\n+1 3:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newStreamed(t, path, 2, 1)
	var err error
	for range 3 {
		if _, err = m.NextBatch(); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("got %v; want an error naming %s:2", err, path)
	}
}

// With Epochs, a worker's part is read that many times, in batches that run
// on across the passes, the last holding what is left; then NextBatch
// returns model.ErrEndOfData, and goes on returning it. Loaded and streamed
// alike.
func TestEpochsEndTheData(t *testing.T) {
	var b strings.Builder
	const rows = 10
	for i := range rows {
		fmt.Fprintf(&b, "%s %d:1\n", []string{"-1", "+1"}[i%2], i+1)
	}
	path := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, buffer := range []int{0, 1, 4} {
		for _, epochs := range []int{1, 2} {
			t.Run(fmt.Sprintf("buffer=%d/epochs=%d", buffer, epochs), func(t *testing.T) {
				m, err := New(model.Config{TrainData: path, BatchSize: 3, Seed: 1, ShuffleBuffer: buffer, Epochs: epochs})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Close)
				seen := make(map[uint64]int)
				var sizes []int
				for range 100 {
					_, err := m.NextBatch()
					if err == model.ErrEndOfData {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					sizes = append(sizes, m.size(&m.cur))
					for n := range m.size(&m.cur) {
						seen[m.at(&m.cur, n).Keys[0]]++
					}
				}
				want := (epochs*rows + 2) / 3 // ceil(epochs·rows / batch)
				if len(sizes) != want || sizes[len(sizes)-1] != epochs*rows-3*(want-1) {
					t.Fatalf("batch sizes %v: want %d batches, the last of %d rows", sizes, want, epochs*rows-3*(want-1))
				}
				for k := range uint64(rows) {
					if seen[k] != epochs {
						t.Fatalf("row of key %d read %d times in %d epochs (all: %v)", k, seen[k], epochs, seen)
					}
				}
				if _, err := m.NextBatch(); err != model.ErrEndOfData {
					t.Fatalf("NextBatch after the end: %v, want model.ErrEndOfData", err)
				}
			})
		}
	}
}

// Read one batch ahead (model.SparseReadAhead), the model computes the
// same batches with the same gradients as read in turn: each batch by
// PrevSparseGradients once the next is read, the last by SparseGradients
// after NextBatch said the data ended, also when the data ends at the end
// of a full batch. Loaded and streamed alike.
func TestReadAheadComputesTheSameBatches(t *testing.T) {
	for _, rows := range []int{9, 10} {
		var b strings.Builder
		for i := range rows {
			fmt.Fprintf(&b, "%s %d:1 %d:0.5\n", []string{"-1", "+1"}[i%2], i+1, 20+i%3)
		}
		path := filepath.Join(t.TempDir(), "train.svm")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, buffer := range []int{0, 4} {
			t.Run(fmt.Sprintf("rows=%d/buffer=%d", rows, buffer), func(t *testing.T) {
				open := func() *Model {
					m, err := New(model.Config{TrainData: path, BatchSize: 3, Seed: 1, ShuffleBuffer: buffer, Epochs: 2})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(m.Close)
					return m
				}
				type step struct {
					keys       []uint64
					loss, bias float64
					grads      []float32
				}
				compute := func(keys []uint64, f func(params, grads model.Params, rows, rowGrads [][]float32) (float64, error)) step {
					w, gw := make([]float32, len(keys)), make([]float32, len(keys))
					for i, k := range keys {
						w[i] = 0.01 * float32(k)
					}
					grads := model.Params{Bias: {0}}
					loss, err := f(model.Params{Bias: {0.1}}, grads, [][]float32{w}, [][]float32{gw})
					if err != nil {
						t.Fatal(err)
					}
					return step{slices.Clone(keys), loss, float64(grads[Bias][0]), gw}
				}
				var inTurn, ahead []step
				m := open()
				for {
					keys, err := m.NextBatch()
					if err == model.ErrEndOfData {
						break
					}
					inTurn = append(inTurn, compute(keys[0], m.SparseGradients))
				}
				m = open()
				keys, err := m.NextBatch()
				if err != nil {
					t.Fatal(err)
				}
				cur := slices.Clone(keys[0])
				for {
					next, err := m.NextBatch()
					if err == model.ErrEndOfData {
						ahead = append(ahead, compute(cur, m.SparseGradients))
						break
					}
					ahead = append(ahead, compute(cur, m.PrevSparseGradients))
					cur = slices.Clone(next[0])
				}
				if len(inTurn) != len(ahead) || len(inTurn) != (2*rows+2)/3 {
					t.Fatalf("%d batches in turn, %d read ahead, want %d", len(inTurn), len(ahead), (2*rows+2)/3)
				}
				for i := range inTurn {
					a, b := inTurn[i], ahead[i]
					if !slices.Equal(a.keys, b.keys) || a.loss != b.loss || a.bias != b.bias || !slices.Equal(a.grads, b.grads) {
						t.Fatalf("batch %d: in turn %+v, read ahead %+v", i, a, b)
					}
				}
			})
		}
	}
}
