package mnist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/testutil"
)

func checkSet(t *testing.T, name string, s *Set, n int) {
	t.Helper()
	if s.Len() != n || len(s.Images) != n*Pixels {
		t.Fatalf("%s: %d labels, %d pixels; want %d examples", name, s.Len(), len(s.Images), n)
	}
	var counts [Classes]int
	for _, l := range s.Labels {
		counts[l]++
	}
	for c, k := range counts {
		if k < n/20 {
			t.Errorf("%s: only %d examples of class %d", name, k, c)
		}
	}
	lo, hi := float32(1), float32(0)
	for _, v := range s.Images {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo != 0 || hi != 1 {
		t.Errorf("%s: pixels span [%g, %g], want [0, 1]", name, lo, hi)
	}
}

// TestLoadTest reads only the test files: quick enough for -short, which
// reads those of MNIST only.
func TestLoadTest(t *testing.T) {
	sets := []string{"mnist", "fashion-mnist"}
	if testing.Short() {
		sets = sets[:1]
	}
	for _, ds := range sets {
		dir := filepath.Join(testutil.DataDir(t, ds), ds)
		s, err := loadSet(dir, TestImagesFile, TestLabelsFile, TestSize)
		if err != nil {
			t.Fatal(err)
		}
		checkSet(t, ds+" test", s, TestSize)
		if ds == "mnist" && string(s.Labels[:5]) != "\x07\x02\x01\x00\x04" {
			t.Errorf("first test labels %v, want [7 2 1 0 4]", s.Labels[:5])
		}
	}
}

func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the 47 MB training images")
	}
	dir := filepath.Join(testutil.DataDir(t, "mnist"), "mnist")
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, "train", d.Train, TrainSize)
	checkSet(t, "validation", d.Validation, ValidationSize)
	checkSet(t, "test", d.Test, TestSize)
	// The training file begins 5 0 4 1 9: those are the validation set's.
	if string(d.Validation.Labels[:5]) != "\x05\x00\x04\x01\x09" {
		t.Errorf("first validation labels %v, want [5 0 4 1 9]", d.Validation.Labels[:5])
	}
}

func TestDir(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "fashion-mnist")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, TrainImagesFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{root, sub} {
		got, err := Dir(in, "fashion-mnist")
		if err != nil || got != sub {
			t.Errorf("Dir(%s) = %q, %v; want %q", in, got, err, sub)
		}
	}
	_, err := Dir(root, "mnist")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "--data_dir") ||
		!strings.Contains(err.Error(), filepath.Join(root, "mnist")) {
		t.Errorf("Dir(%s, mnist): err = %v; want ErrNotFound naming the places looked in and --data_dir", root, err)
	}
}

func writeIDX(t *testing.T, path string, dims []int, data []byte) {
	t.Helper()
	var b bytes.Buffer
	b.Write([]byte{0, 0, 8, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadShapeErrors(t *testing.T) {
	dir := t.TempDir()
	images := filepath.Join(dir, TestImagesFile)
	labels := filepath.Join(dir, TestLabelsFile)

	writeIDX(t, images, []int{2, 14, 56}, make([]byte, 2*784))
	_, err := loadSet(dir, TestImagesFile, TestLabelsFile, 2)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), images) || !strings.Contains(err.Error(), "[2 14 56], want [2 28 28]") {
		t.Errorf("wrong image shape: err = %v", err)
	}

	writeIDX(t, images, []int{2, 28, 28}, make([]byte, 2*784))
	writeIDX(t, labels, []int{3}, []byte{1, 2, 3})
	_, err = loadSet(dir, TestImagesFile, TestLabelsFile, 2)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), labels) {
		t.Errorf("label count: err = %v", err)
	}

	writeIDX(t, labels, []int{2}, []byte{1, 10})
	_, err = loadSet(dir, TestImagesFile, TestLabelsFile, 2)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "label 10 of example 1") {
		t.Errorf("bad label: err = %v", err)
	}

	writeIDX(t, labels, []int{2}, []byte{1, 9})
	s, err := loadSet(dir, TestImagesFile, TestLabelsFile, 2)
	if err != nil || s.Len() != 2 {
		t.Errorf("valid files: %v", err)
	}

	if _, err := Load(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(empty dir): err = %v, want os.ErrNotExist", err)
	}
}

// synthetic returns a set of n examples whose first pixel holds the index.
func synthetic(n int) *Set {
	s := &Set{Images: make([]float32, n*Pixels), Labels: make([]uint8, n)}
	for i := range n {
		s.Images[i*Pixels] = float32(i)
		s.Labels[i] = uint8(i % Classes)
	}
	return s
}

func TestPartition(t *testing.T) {
	for _, n := range []int{1, 7, 100, 1009} {
		s := synthetic(n)
		for _, k := range []int{1, 2, 3, 7, 16} {
			if k > n {
				continue
			}
			seen := make([]int, n)
			for w := range k {
				p, err := s.Partition(w, k)
				if err != nil {
					t.Fatal(err)
				}
				if p.Len() < n/k || p.Len() > n/k+1 {
					t.Errorf("n=%d k=%d worker %d: %d examples", n, k, w, p.Len())
				}
				for i := range p.Len() {
					seen[int(p.Image(i)[0])]++
					if int(p.Labels[i]) != int(p.Image(i)[0])%Classes {
						t.Fatalf("labels and images out of step")
					}
				}
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("n=%d k=%d: example %d in %d partitions", n, k, i, c)
				}
			}
		}
	}
	s := synthetic(5)
	for _, tt := range [][2]int{{0, 0}, {-1, 2}, {2, 2}, {0, 6}} {
		if _, err := s.Partition(tt[0], tt[1]); err == nil {
			t.Errorf("Partition(%d, %d) of 5: no error", tt[0], tt[1])
		}
	}
}

func TestBatches(t *testing.T) {
	const n = 103
	s := synthetic(n)
	for _, bs := range []int{1, 10, 103, 250} {
		b, err := NewBatches(s, bs, 42)
		if err != nil {
			t.Fatal(err)
		}
		// Draw three epochs' worth; each epoch visits every example once.
		var order []int
		for len(order) < 3*n {
			order = append(order, b.Next()...)
		}
		for e := range 3 {
			seen := make([]bool, n)
			for _, i := range order[e*n : (e+1)*n] {
				if seen[i] {
					t.Fatalf("batch %d: example %d twice in epoch %d", bs, i, e)
				}
				seen[i] = true
			}
		}
		if b.Epoch() < 3 {
			t.Errorf("batch %d: %d epochs after %d examples", bs, b.Epoch(), len(order))
		}
		if order[0] == 0 && order[1] == 1 && order[2] == 2 {
			t.Errorf("batch %d: first epoch is not shuffled", bs)
		}
	}

	// Same seed, same batches; other seed, other batches.
	a, _ := NewBatches(s, 10, 1)
	b, _ := NewBatches(s, 10, 1)
	c, _ := NewBatches(s, 10, 2)
	same, differ := true, false
	for range 30 {
		x, y, z := a.Next(), append([]int(nil), b.Next()...), c.Next()
		for i := range x {
			same = same && x[i] == y[i]
			differ = differ || x[i] != z[i]
		}
	}
	if !same || !differ {
		t.Errorf("same seed same batches: %v; other seed other batches: %v", same, differ)
	}

	if allocs := testing.AllocsPerRun(100, func() { a.Next() }); allocs != 0 {
		t.Errorf("Next allocates %v times", allocs)
	}
	if _, err := NewBatches(s, 0, 1); err == nil {
		t.Error("batch size 0: no error")
	}
	if _, err := NewBatches(&Set{}, 1, 1); err == nil {
		t.Error("empty set: no error")
	}
}
