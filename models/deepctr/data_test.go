package deepctr

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAUC(t *testing.T) {
	for _, c := range []struct {
		scores []float64
		labels []float32
		want   float64
	}{
		{[]float64{0.1, 0.4, 0.35, 0.8}, []float32{0, 0, 1, 1}, 0.75},
		{[]float64{1, 2, 3}, []float32{0, 1, 1}, 1},
		{[]float64{1, 1, 1, 1}, []float32{0, 1, 0, 1}, 0.5}, // ties count one half
		{[]float64{3, 2, 1}, []float32{0, 1, 1}, 0},
	} {
		if got := AUC(c.scores, c.labels); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("AUC(%v, %v) = %v, want %v", c.scores, c.labels, got, c.want)
		}
	}
}

func TestReadFilesParts(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tsv"), filepath.Join(dir, "b.tsv")
	os.WriteFile(a, []byte("1\tx\t\n0\ty\tz\n"), 0o644)
	os.WriteFile(b, []byte("1\tx\tz\n"), 0o644)
	w0, err := ReadFiles([]string{a, b}, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := ReadFiles([]string{a, b}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if w0.Len() != 2 || w1.Len() != 1 || w0.Fields != 2 {
		t.Fatalf("parts of %d and %d rows, %d fields; want 2, 1 and 2", w0.Len(), w1.Len(), w0.Fields)
	}
	if w0.Keys[1] != 0 || w0.Keys[0] != Key("x") || w0.Keys[3] != Key("z") || w1.Labels[0] != 0 {
		t.Errorf("rows %v %v / %v", w0.Keys, w0.Labels, w1.Labels)
	}
	os.WriteFile(b, []byte("1\tx\n"), 0o644)
	if _, err := ReadFiles([]string{a, b}, 0, 1); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), b+":1") {
		t.Errorf("a row of another width: err = %v, want ErrInput naming %s:1", err, b)
	}
	if _, err := DataFiles(dir); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "meta.json") {
		t.Errorf("a directory without meta.json: err = %v", err)
	}
	os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"files":["a.tsv","b.tsv"]}`), 0o644)
	if got, err := DataFiles(dir); err != nil || len(got) != 2 || got[1] != b {
		t.Errorf("DataFiles = %v, %v", got, err)
	}
}
