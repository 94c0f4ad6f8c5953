package shard

import (
	"reflect"
	"testing"

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
