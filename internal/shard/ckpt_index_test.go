package shard

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/vfs"
)

// A cut into memory sized before the lock (CutIn, as the server cuts) of a
// table trained by pushes (rows in insertion order) streams the table's
// index beside its rows: the shard is Indexed, the checkpoint format
// version 5. The ps restoring it onto one ps takes the index (read in
// place from the mapped file) and holds the table the cut held; restored
// onto 2 and 3 ps (re-sharded, where the index is of no use) the ps
// together hold the same rows; a cut without that memory writes no index
// (nor does a table with freed rows: TestImportIndexed); and InKeyOrder
// drops it.
func TestCheckpointSavesTheIndex(t *testing.T) {
	const n = 70_000 // a few pages, past incremental growth
	s := trainedShard(t, n, 1)
	want := s.st.tables["emb"].t.Export()
	if s.Cut().StreamShard().Indexed {
		t.Fatal("a cut without memory sized before it saved the index")
	}
	cut := s.CutIn(s.CutSize().Alloc())
	sh := cut.StreamShard()
	if !sh.Indexed {
		t.Fatal("the cut's shard holds no index: the test needs a table whose index is whole at the cut")
	}
	dir := t.TempDir()
	info, err := checkpoint.WriteShard(vfs.OS, dir, 1000, 0, 1, sh)
	cut.Release()
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint.Manifest{Step: 1000, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: 1, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	m, err = checkpoint.Load(vfs.OS, dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != checkpoint.IndexFormatVersion || !m.Shards[0].Indexed {
		t.Fatalf("format_version %d, indexed %v; want %d, true", m.FormatVersion, m.Shards[0].Indexed, checkpoint.IndexFormatVersion)
	}

	file, release, err := checkpoint.ReadShardOverlapped(vfs.OS, dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	ix, ok := savedIndex(&file, "emb")
	release()
	if !ok || len(ix.Slots) == 0 {
		t.Fatal("the restore finds no index in the file")
	}
	st, _, err := restoreOneFrom(m, dir, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.tables["emb"].t.Export(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %d rows, not the %d the cut held", len(got.Keys), len(want.Keys))
	}

	for _, numPS := range []int{2, 3} {
		var keys int
		for task := range numPS {
			st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
				sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
				return &sh, err
			}, task, numPS, 1, testRunner)
			if err != nil {
				t.Fatalf("onto %d ps, ps %d: %v", numPS, task, err)
			}
			keys += st.tables["emb"].t.Len()
		}
		if keys != n {
			t.Fatalf("onto %d ps: %d rows in all, want %d", numPS, keys, n)
		}
	}

	whole, err := checkpoint.ReadShard(vfs.OS, dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	sorted, err := checkpoint.InKeyOrder(whole, m.Tables)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sorted.Lookup(ckptformat.IndexName("emb")); err == nil || sorted.Indexed {
		t.Fatal("InKeyOrder kept the index of rows it reordered")
	}
	if _, ok := sorted.Meta[ckptformat.IndexMaskMeta("emb")]; ok {
		t.Fatal("InKeyOrder kept the index's metadata")
	}
}

// A ps restoring an indexed shard from its mapped file keeps the table's
// keys and index in the file's pages (sparse.Table.ImportIndexedInPlace)
// and trains on, writing them copy-on-write: after pushes that change old
// rows, add new ones and grow the index, it holds what a ps that restored
// the same file by copying holds, and the file is unchanged, byte for
// byte (still valid against its checksum). Once the table is gone, the
// mapping is too.
func TestRestoreInPlaceLeavesTheFile(t *testing.T) {
	const n = 70_000
	s := trainedShard(t, n, 1)
	cut := s.CutIn(s.CutSize().Alloc())
	sh := cut.StreamShard()
	dir := t.TempDir()
	info, err := checkpoint.WriteShard(vfs.OS, dir, 1000, 0, 1, sh)
	cut.Release()
	if err != nil || !sh.Indexed {
		t.Fatalf("indexed %v, %v", sh.Indexed, err)
	}
	m := checkpoint.Manifest{Step: 1000, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: 1, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, checkpoint.CheckpointName(1000), info.File)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := s.st.tables["emb"].t.Export().Keys

	train := func(mapped bool) *Shard {
		st, _, err := restoreOneFrom(m, dir, mapped, mapped)
		if err != nil {
			t.Fatal(err)
		}
		if held := st.tables["emb"].t.Held(); held != mapped {
			t.Fatalf("mapped %v: the table holds the file's memory: %v", mapped, held)
		}
		sh := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Parallel: testRunner})
		sh.Install(st)
		rng := rand.New(rand.NewPCG(3, 4))
		for range 40 { // old keys and about 40k new ones: the index grows
			batch := make([]uint64, 2000)
			for i := range batch {
				if i%2 == 0 {
					batch[i] = keys[rng.IntN(len(keys))]
				} else {
					batch[i] = rng.Uint64()
				}
			}
			batch = slices.Compact(slices.Sorted(slices.Values(batch)))
			p := &Push{Worker: 0, Step: sh.Step(), Sparse: []SparseGrad{{Table: []byte("emb"), Keys: batch, Values: randFloats(rng, len(batch)), Bad: Unchecked}}}
			if err := sh.Check(p); err != nil {
				t.Fatal(err)
			}
			if _, err := sh.Apply(p, time.Now(), nil); err != nil {
				t.Fatal(err)
			}
		}
		return sh
	}
	copied, inPlace := train(false), train(true)
	want, got := copied.st.tables["emb"].t.Export(), inPlace.st.tables["emb"].t.Export()
	if len(got.Keys) < n+30_000 || !reflect.DeepEqual(got, want) {
		t.Fatalf("in place: %d rows; by copy: %d rows; they differ", len(got.Keys), len(want.Keys))
	}
	for _, k := range keys {
		if !inPlace.st.tables["emb"].t.Has(k) {
			t.Fatalf("key %d of the file is not found after training", k)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("training the restored table changed the checkpoint file")
	}
	if _, err := checkpoint.ReadShard(vfs.OS, dir, m, 0); err != nil {
		t.Fatalf("the file after training: %v", err)
	}

	mapped := func() bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skip("no /proc/self/maps")
		}
		return bytes.Contains(b, []byte(path))
	}
	if !mapped() {
		t.Fatal("the table's memory is not the file's mapping")
	}
	// Of the mapping, the process keeps the keys' and the index's pages
	// only: the values and state, copied into the table's rows, are
	// given back.
	ix, _ := savedIndex(&sh, "emb")
	if rss, held := mappedRSS(t, path), int64(8*n+4*len(ix.Slots)); rss > held+4*4096 {
		t.Fatalf("the file's mapping holds %d bytes of memory; the keys and index are %d", rss, held)
	}
	runtime.KeepAlive(inPlace) // until here: then it is garbage
	for i := 0; i < 50 && mapped(); i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if mapped() {
		t.Fatal("the file is still mapped after the table is gone")
	}
}

// A cut with memory for the index alone (CutSize.IndexOnly, as a ps of a
// one-worker job cuts) still saves the index, and pushes after it still
// leave the cut's rows as they were, copying their pages into memory of
// their own.
func TestCutIndexOnly(t *testing.T) {
	const n = 70_000
	s := trainedShard(t, n, 1)
	want := s.st.tables["emb"].t.Export()
	cut := s.CutIn(s.CutSize().IndexOnly().Alloc())
	p := &Push{Worker: 0, Step: s.Step(), Sparse: []SparseGrad{{Table: []byte("emb"), Keys: want.Keys[:5000], Values: make([]float32, 5000), Bad: Unchecked}}}
	for i := range p.Sparse[0].Values {
		p.Sparse[0].Values[i] = 1
	}
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(p, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	got, err := cut.Shard().Float32s("emb/values") // in key order, as Export's
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want.Values) {
		t.Fatal("a push after the cut changed the cut's rows")
	}
	if reflect.DeepEqual(s.st.tables["emb"].t.Export().Values, want.Values) {
		t.Fatal("the push changed nothing")
	}
	cut2 := s.CutIn(s.CutSize().IndexOnly().Alloc())
	defer cut2.Release()
	if !cut2.StreamShard().Indexed {
		t.Fatal("a cut with memory for the index alone saved no index")
	}
}

// mappedRSS is the memory of the process's mappings of path
// (/proc/self/smaps).
func mappedRSS(t *testing.T, path string) int64 {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps")
	}
	var rss int64
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"): // a mapping's first line
			in = f[len(f)-1] == path
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss += kb << 10
		}
	}
	return rss
}
