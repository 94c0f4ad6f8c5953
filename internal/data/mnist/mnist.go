// Package mnist loads MNIST and Fashion-MNIST, the two datasets that share the
// IDX file layout, and splits them the way TensorFlow's classic
// input_data.read_data_sets does: of the 60,000 training images the first
// 5,000 are the validation set and the remaining 55,000 the training set; the
// 10,000 t10k images are the test set. Pixels become float32 in [0, 1].
//
// A worker of a distributed job trains on its own part of the training set
// (Set.Partition) and draws batches from it with a Batches iterator, which
// shuffles that part afresh each epoch from a seed.
//
// A loaded Set is never modified, so one Data may be shared by any number of
// goroutines (several in-process workers, say). A Batches belongs to one
// goroutine.
package mnist

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/paramserv/paramserv/internal/data/idx"
)

// Shape of the data and sizes of the split.
const (
	Rows           = 28
	Cols           = 28
	Pixels         = Rows * Cols // 784 values per image
	Classes        = 10
	ValidationSize = 5000
	TrainSize      = 55000
	TestSize       = 10000
)

// The four files of each dataset, as published.
const (
	TrainImagesFile = "train-images-idx3-ubyte.gz"
	TrainLabelsFile = "train-labels-idx1-ubyte.gz"
	TestImagesFile  = "t10k-images-idx3-ubyte.gz"
	TestLabelsFile  = "t10k-labels-idx1-ubyte.gz"
)

// Files lists the four file names.
var Files = []string{TrainImagesFile, TrainLabelsFile, TestImagesFile, TestLabelsFile}

// ErrFormat reports files that are valid IDX but not MNIST-shaped.
var ErrFormat = errors.New("mnist: unexpected data")

// ErrNotFound reports a directory that holds no copy of the dataset.
var ErrNotFound = errors.New("mnist: dataset not found")

// Set is a list of labelled images. It is read-only once built.
type Set struct {
	Images []float32 // Len()×Pixels, row-major, each in [0, 1]
	Labels []uint8   // Len(), each in [0, Classes)
}

// Len is the number of examples.
func (s *Set) Len() int { return len(s.Labels) }

// Image returns the Pixels values of example i (a view, not a copy).
func (s *Set) Image(i int) []float32 { return s.Images[i*Pixels : (i+1)*Pixels] }

// Slice returns examples [lo, hi) as a Set sharing s's memory.
func (s *Set) Slice(lo, hi int) *Set {
	return &Set{Images: s.Images[lo*Pixels : hi*Pixels], Labels: s.Labels[lo:hi]}
}

// Partition returns worker's share of s when it is split between numWorkers
// workers: a contiguous range, sharing s's memory, of Len()/numWorkers
// examples or one more. The shares are disjoint and together cover s.
func (s *Set) Partition(worker, numWorkers int) (*Set, error) {
	n := s.Len()
	if numWorkers < 1 || numWorkers > n {
		return nil, fmt.Errorf("mnist: cannot split %d examples between %d workers: want 1 to %d workers", n, numWorkers, n)
	}
	if worker < 0 || worker >= numWorkers {
		return nil, fmt.Errorf("mnist: worker %d out of range: want 0 to %d for %d workers", worker, numWorkers-1, numWorkers)
	}
	return s.Slice(worker*n/numWorkers, (worker+1)*n/numWorkers), nil
}

// Data is a dataset split three ways.
type Data struct {
	Train      *Set // TrainSize examples: the training file less its first ValidationSize
	Validation *Set // ValidationSize examples: the first of the training file
	Test       *Set // TestSize examples: the t10k file
}

// Load reads the four files of MNIST or Fashion-MNIST from dir (see Dir for
// finding it) and splits them. Errors name the file at fault.
func Load(dir string) (*Data, error) {
	train, err := loadSet(dir, TrainImagesFile, TrainLabelsFile, ValidationSize+TrainSize)
	if err != nil {
		return nil, err
	}
	test, err := loadSet(dir, TestImagesFile, TestLabelsFile, TestSize)
	if err != nil {
		return nil, err
	}
	return &Data{
		Validation: train.Slice(0, ValidationSize),
		Train:      train.Slice(ValidationSize, ValidationSize+TrainSize),
		Test:       test,
	}, nil
}

// scale maps a pixel byte to [0, 1].
var scale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(float64(i) / 255)
	}
	return t
}()

func loadSet(dir, imagesFile, labelsFile string, n int) (*Set, error) {
	ipath, lpath := filepath.Join(dir, imagesFile), filepath.Join(dir, labelsFile)
	images, err := idx.ReadFile(ipath)
	if err != nil {
		return nil, err
	}
	if len(images.Dims) != 3 || images.Dims[0] != n || images.Dims[1] != Rows || images.Dims[2] != Cols {
		return nil, fmt.Errorf("%w: %s: images of dimensions %v, want [%d %d %d]", ErrFormat, ipath, images.Dims, n, Rows, Cols)
	}
	labels, err := idx.ReadFile(lpath)
	if err != nil {
		return nil, err
	}
	if len(labels.Dims) != 1 || labels.Dims[0] != n {
		return nil, fmt.Errorf("%w: %s: labels of dimensions %v, want [%d]", ErrFormat, lpath, labels.Dims, n)
	}
	for i, l := range labels.Data {
		if l >= Classes {
			return nil, fmt.Errorf("%w: %s: label %d of example %d, want 0 to %d", ErrFormat, lpath, l, i, Classes-1)
		}
	}
	s := &Set{Images: make([]float32, len(images.Data)), Labels: labels.Data}
	for i, b := range images.Data {
		s.Images[i] = scale[b]
	}
	return s, nil
}

// Dir finds the folder holding the four files of dataset ("mnist" or
// "fashion-mnist") given root, which is either that folder itself or its
// parent, holding a folder named after the dataset (as the shared data
// directory and fetch's cache do).
func Dir(root, dataset string) (string, error) {
	candidates := []string{root, filepath.Join(root, dataset)}
	for _, dir := range candidates {
		if _, err := os.Stat(filepath.Join(dir, TrainImagesFile)); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no %s in %s or %s; point --data_dir at a folder holding %s, %s, %s and %s (or at its parent, holding %s/), or download them with: paramserv data fetch %s --dir %s",
		ErrNotFound, TrainImagesFile, candidates[0], candidates[1],
		TrainImagesFile, TrainLabelsFile, TestImagesFile, TestLabelsFile, dataset, dataset, root)
}

// Batches draws batches from a Set, TensorFlow's DataSet.next_batch way: it
// walks a random permutation of the set, drawn afresh from its seed for every
// epoch, and a batch that crosses the end of an epoch is completed from the
// start of the next. Every batch has the same size. A Batches belongs to one
// goroutine.
type Batches struct {
	set   *Set
	rng   *rand.Rand
	perm  []int // this epoch's order
	pos   int   // next index into perm
	epoch int   // completed epochs
	batch []int // reused result
}

// NewBatches returns an iterator over set yielding batchSize examples at a
// time. The same seed gives the same batches.
func NewBatches(set *Set, batchSize int, seed uint64) (*Batches, error) {
	if set.Len() == 0 {
		return nil, errors.New("mnist: cannot draw batches from an empty set")
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("mnist: batch size %d, want at least 1", batchSize)
	}
	b := &Batches{
		set:   set,
		rng:   rand.New(rand.NewPCG(seed, 0x6d6e697374)), // "mnist"
		perm:  make([]int, set.Len()),
		batch: make([]int, batchSize),
	}
	for i := range b.perm {
		b.perm[i] = i
	}
	b.shuffle()
	return b, nil
}

func (b *Batches) shuffle() {
	b.rng.Shuffle(len(b.perm), func(i, j int) { b.perm[i], b.perm[j] = b.perm[j], b.perm[i] })
	b.pos = 0
}

// Next returns the indices into the set of the next batch. The slice is
// reused by the following call. Next does not allocate.
func (b *Batches) Next() []int {
	for i := range b.batch {
		b.batch[i] = b.perm[b.pos]
		b.pos++
		if b.pos == len(b.perm) {
			b.epoch++
			b.shuffle()
		}
	}
	return b.batch
}

// Epoch is the number of epochs completed so far.
func (b *Batches) Epoch() int { return b.epoch }

// Set is the set the batches come from.
func (b *Batches) Set() *Set { return b.set }
