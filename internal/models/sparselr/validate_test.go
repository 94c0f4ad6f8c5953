package sparselr

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
)

// ValidateSparse scores the --validation_data file, loaded or streamed,
// with the rows lookup returns; without one it returns nothing; a
// validation file that is also a training or test file is refused.
func TestValidateSparse(t *testing.T) {
	dir := t.TempDir()
	write := func(name, lines string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	train := write("train.svm", "+1 1:1\n-1 2:1\n+1 1:1\n-1 2:1\n")
	test := write("test.svm", "+1 1:1\n-1 2:1\n")
	// Labelled against the rule the weights below encode: a validation
	// that read the training or test file would score 1, this one 0.
	val := write("val.svm", "-1 1:1\n+1 2:1\n-1 1:1 3:1\n")
	// Weight +2 for feature 1, -2 for feature 2, 0 for any other.
	var asked []uint64
	lookup := func(tb int, keys []uint64, out []float32) error {
		if tb != 0 || len(out) != len(keys) {
			t.Fatalf("lookup of table %d, %d keys into %d values", tb, len(keys), len(out))
		}
		for i, k := range keys {
			asked = append(asked, k)
			out[i] = map[uint64]float32{0: 2, 1: -2}[k] // keys are 1-based indices - 1
		}
		return nil
	}
	params := model.Params{Bias: {0}}
	for _, shuffle := range []int{0, 8} {
		m, err := New(model.Config{TrainData: train, TestData: test, ValidationData: val, BatchSize: 2, Seed: 1, ShuffleBuffer: shuffle})
		if err != nil {
			t.Fatal(err)
		}
		asked = nil
		got, err := m.ValidateSparse(params, lookup)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		wantLoss := (2*math.Log1p(math.Exp(2)) + math.Log1p(math.Exp(2))) / 3 // every example wrong by a margin of 2
		if got["val_accuracy"] != 0 || math.Abs(got["val_log_loss"]-wantLoss) > 1e-6 || got["val_auc"] != 0 || len(got) != 3 {
			t.Errorf("shuffle_buffer %d: %v, want val_accuracy 0, val_auc 0, val_log_loss %.6f and no more", shuffle, got, wantLoss)
		}
		if len(asked) != 3 {
			t.Errorf("shuffle_buffer %d: looked up keys %v, want the validation file's 3", shuffle, asked)
		}
	}

	m, err := New(model.Config{TrainData: train, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.ValidateSparse(params, lookup); got != nil || err != nil {
		t.Errorf("without --validation_data: %v, %v; want nothing", got, err)
	}
	for _, c := range []struct{ train, test, val, want string }{
		{train, "", train, "--validation_data=" + train + " reads the --train_data"},
		{dir, "", val, "reads the --train_data=" + dir},
		{train, test, test, "reads the --test_data"},
		{train, "", filepath.Join(dir, "nope.svm"), "--validation_data: \"" + filepath.Join(dir, "nope.svm") + "\" not found"},
	} {
		if _, err := New(model.Config{TrainData: c.train, TestData: c.test, ValidationData: c.val, BatchSize: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("train %s, test %s, validation %s: %v; want an error with %q", c.train, c.test, c.val, err, c.want)
		}
	}
}
