package synth

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/paramserv/paramserv/internal/data/criteo"
	"github.com/paramserv/paramserv/internal/metrics"
)

func smallConfig(dir string) Config {
	c := DefaultConfig()
	c.Out = dir
	c.Rows = 6000
	c.TestRows = 3000
	c.Fields = 8
	c.Shards = 3
	c.Seed = 42
	c.Missing = 0.1
	return c
}

// readDir returns every file of dir by name.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func TestSameSeedSameBytes(t *testing.T) {
	var runs []map[string][]byte
	for _, parallel := range []int{1, 3} {
		c := smallConfig(t.TempDir())
		c.Parallel = parallel
		if _, err := Generate(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, readDir(t, c.Out))
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range runs[0] {
			if !yield(n) {
				return
			}
		}
	})
	want := []string{"meta.json", "part-00000.tsv", "part-00001.tsv", "part-00002.tsv", "test.tsv"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	for _, n := range names {
		if !bytes.Equal(runs[0][n], runs[1][n]) {
			t.Errorf("%s differs between two runs with the same seed", n)
		}
	}

	c := smallConfig(t.TempDir())
	c.Seed = 43
	if _, err := Generate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if other := readDir(t, c.Out); bytes.Equal(other["part-00000.tsv"], runs[0]["part-00000.tsv"]) {
		t.Error("seeds 42 and 43 give the same shard")
	}
}

// TestPlantedModelMatchesFiles reads the files back with package criteo and
// checks them against Meta: row counts, and the test AUC of the planted
// model computed from the parsed keys.
func TestPlantedModelMatchesFiles(t *testing.T) {
	c := smallConfig(t.TempDir())
	m, err := Generate(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if m2, err := ReadMeta(c.Out); err != nil || m2.DistinctKeys != m.DistinctKeys || *m2.TestBayesAUC != *m.TestBayesAUC {
		t.Fatalf("ReadMeta = %+v, %v; want %+v", m2, err, m)
	}
	if m.TestBayesAUC == nil || *m.TestBayesAUC < 0.7 {
		t.Errorf("Bayes AUC %v, want > 0.7", m.TestBayesAUC)
	}
	if m.TestPositiveRate < 0.1 || m.TestPositiveRate > 0.45 || math.Abs(m.TrainPositiveRate-m.TestPositiveRate) > 0.05 {
		t.Errorf("click rates train %v test %v, want about 0.25 both", m.TrainPositiveRate, m.TestPositiveRate)
	}

	opts := criteo.Options{IntFields: m.IntFields, CatFields: m.CatFields}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, filepath.Join(c.Out, f))
	}
	train, _, err := criteo.ReadFiles(paths, opts)
	if err != nil {
		t.Fatal(err)
	}
	if int64(train.Len()) != m.Rows {
		t.Errorf("%d training rows, want %d", train.Len(), m.Rows)
	}
	distinct := map[uint64]bool{}
	for _, k := range train.Keys {
		distinct[k] = true
	}
	if got := float64(m.DistinctKeys) / float64(len(distinct)); math.Abs(got-1) > 0.03 {
		t.Errorf("DistinctKeys %d, exact %d", m.DistinctKeys, len(distinct))
	}
	// About 10% of fields are missing.
	if frac := float64(train.NNZ()) / float64(train.Len()*c.Fields); math.Abs(frac-0.9) > 0.02 {
		t.Errorf("%.3f of fields present, want 0.9", frac)
	}

	test, _, err := criteo.ReadFile(filepath.Join(c.Out, m.TestFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	model := m.Planted()
	var acc metrics.Accumulator
	for i := range test.Len() {
		ex := test.At(i)
		acc.Add(ex.Label, model.Prob(ex.Keys))
	}
	if acc.N() != int(m.TestRows) || acc.AUC() != *m.TestBayesAUC || acc.LogLoss() != m.TestBayesLogLoss {
		t.Errorf("planted model on test.tsv: n %d AUC %v log loss %v; meta says %d %v %v",
			acc.N(), acc.AUC(), acc.LogLoss(), m.TestRows, *m.TestBayesAUC, m.TestBayesLogLoss)
	}
}

func TestZipfFrequencies(t *testing.T) {
	for _, s := range []float64{0, 0.5, 1, 1.5} {
		const n, draws = 50, 200000
		z := newZipf(n, s)
		rng := newStream(7, 0)
		counts := make([]int, n)
		for range draws {
			counts[z.rank(rng.float())]++
		}
		// Rank r covers [r+1, r+2) of the continuous law on [1, n+1).
		cdf := func(x float64) float64 {
			if math.Abs(1-s) < 1e-9 {
				return math.Log(x) / math.Log(n+1)
			}
			return (math.Pow(x, 1-s) - 1) / (math.Pow(n+1, 1-s) - 1)
		}
		for _, r := range []int{0, 1, 5, 20, n - 1} {
			want := draws * (cdf(float64(r+2)) - cdf(float64(r+1)))
			if got := float64(counts[r]); math.Abs(got-want) > 5*math.Sqrt(want)+1 {
				t.Errorf("s=%v: rank %d drawn %v times, want %.0f", s, r, got, want)
			}
		}
	}
}

func TestHLL(t *testing.T) {
	for _, n := range []int{0, 10, 1000, 300000} {
		var h hll
		rng := newStream(1, 2)
		for range n {
			k := rng.next()
			h.add(k)
			h.add(k) // duplicates do not count
		}
		if got := h.estimate(); math.Abs(got-float64(n)) > 0.03*float64(n)+1 {
			t.Errorf("estimate of %d distinct keys = %.0f", n, got)
		}
	}
}

func TestPerm32IsABijection(t *testing.T) {
	seen := make(map[uint32]bool, 1<<16)
	for x := range uint32(1 << 16) {
		v := perm32(x, 12345)
		if seen[v] {
			t.Fatalf("perm32 repeats %#x", v)
		}
		seen[v] = true
	}
}

func TestPlantedWeightsAreNormal(t *testing.T) {
	p := Planted{Seed: 9, Sigma: 2}
	var sum, sq float64
	const n = 100000
	for k := range uint64(n) {
		w := p.Weight(k)
		sum += w
		sq += w * w
	}
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 0.03 || math.Abs(std-2) > 0.03 {
		t.Errorf("weights have mean %.3f, std %.3f; want 0 and 2", mean, std)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Out = "" },
		func(c *Config) { c.Rows = 0 },
		func(c *Config) { c.Fields = 0 },
		func(c *Config) { c.Shards = 0 },
		func(c *Config) { c.Missing = 1 },
		func(c *Config) { c.ZipfS = -1 },
		func(c *Config) { c.Bias = math.NaN() },
	} {
		c := smallConfig(t.TempDir())
		mod(&c)
		if _, err := Generate(context.Background(), c); err == nil || !strings.HasPrefix(err.Error(), "synth: ") {
			t.Errorf("Generate(%+v) = %v, want a synth: error", c, err)
		}
	}
}

func TestCancelLeavesNoTemporaryFiles(t *testing.T) {
	c := smallConfig(t.TempDir())
	c.Rows = 1 << 20
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Generate(ctx, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate with a cancelled context = %v, want context.Canceled", err)
	}
	for name := range readDir(t, c.Out) {
		if strings.HasSuffix(name, ".tmp") || name == MetaFile {
			t.Errorf("left %s behind", name)
		}
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Command(context.Background(), []string{"--out", dir, "--rows", "2000", "--fields", "5", "--shards", "2", "--seed", "3"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "wrote 2000 rows in 2 shards + 1000 test rows") || !strings.Contains(out.String(), "Bayes-optimal on test: AUC 0.") {
		t.Errorf("output:\n%s", out.String())
	}
	m, err := ReadMeta(dir)
	if err != nil || m.CatFields != 5 || m.Seed != 3 || len(m.Files) != 2 {
		t.Errorf("meta %+v, %v", m, err)
	}
	if err := Command(context.Background(), []string{"--rows", "10"}, &out); err == nil {
		t.Error("Command without --out succeeded")
	}
}

func BenchmarkGenerate(b *testing.B) {
	c := DefaultConfig()
	c.Out = b.TempDir()
	c.Rows = 100000
	c.TestRows = 1000
	var bytes int64
	for b.Loop() {
		m, err := Generate(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		bytes = m.Bytes
	}
	b.SetBytes(bytes)
	b.ReportMetric(float64(c.Rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// Cancelled in the middle of writing (the shards' temporary files exist
// and hold rows), Generate removes every temporary file, writes no
// meta.json and says it was cancelled.
func TestCancelWhileWritingLeavesNoTemporaryFiles(t *testing.T) {
	c := smallConfig(t.TempDir())
	c.Rows = 1 << 20
	c.Parallel = 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	midWrite := false
	testHookRows = func(tmp string, rows int64) {
		if rows < 3*4096 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := os.Stat(tmp); err == nil {
			midWrite = true
		}
		cancel()
	}
	defer func() { testHookRows = nil }()
	_, err := Generate(ctx, c)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("Generate cancelled while writing = %v, want an error saying context canceled", err)
	}
	if !midWrite {
		t.Fatal("the cancel did not come while a temporary file was being written")
	}
	for name := range readDir(t, c.Out) {
		if strings.HasSuffix(name, ".tmp") || name == MetaFile {
			t.Errorf("left %s behind after a cancel in the middle of writing", name)
		}
	}
}

// TestRewriteLeavesOnlyItsOwnShards writes a directory twice, with fewer
// shards the second time: the first run's extra shards are gone (a trainer
// reads every file of the directory), and during the second run the first
// run's meta.json no longer claims the directory complete.
func TestRewriteLeavesOnlyItsOwnShards(t *testing.T) {
	c := smallConfig(t.TempDir())
	c.Shards = 5
	if _, err := Generate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	c.Shards = 2
	c.Seed++
	testHookRows = func(string, int64) {
		if _, err := os.Stat(filepath.Join(c.Out, MetaFile)); err == nil {
			t.Errorf("meta.json of the earlier run is there while the next one writes")
		}
	}
	defer func() { testHookRows = nil }()
	if _, err := Generate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(readDir(t, c.Out)))
	if want := []string{"meta.json", "part-00000.tsv", "part-00001.tsv", "test.tsv"}; !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
}
