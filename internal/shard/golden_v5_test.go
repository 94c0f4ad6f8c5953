package shard

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/vfs"
)

// goldenV5Dir holds a checkpoint of format version 5 (IndexFormatVersion):
// one ps's shard of a table trained by pushes (rows in insertion order),
// written as a ps writes it, with the table's index beside its rows. It was
// written by
//
//	PARAMSERV_WRITE_GOLDEN=1 go test -run TestWriteGoldenV5 ./internal/shard/
//
// and is committed so that later readers, and later layouts of the sparse
// table's index, are tested against it: the rows must restore bit for bit
// whether the index is taken as it lies or (an index of another layout,
// refused by its check) built again. Do not regenerate it to make a test
// pass. It holds 16,390 rows, the fewest that fill the two pages a restore
// takes an index for.
const goldenV5Dir = "../checkpoint/testdata/golden-v5"

const goldenV5Step, goldenV5Rows = 500, 16_390

// TestWriteGoldenV5 writes testdata/golden-v5; it runs only when asked.
func TestWriteGoldenV5(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") != "1" {
		t.Skip("set PARAMSERV_WRITE_GOLDEN=1 to rewrite " + goldenV5Dir)
	}
	if err := os.RemoveAll(goldenV5Dir); err != nil {
		t.Fatal(err)
	}
	s := trainedShard(t, goldenV5Rows, 1)
	cut := s.CutIn(s.CutSize().Alloc())
	sh := cut.StreamShard()
	if !sh.Indexed {
		t.Fatal("the cut holds no index")
	}
	info, err := checkpoint.WriteShard(vfs.OS, goldenV5Dir, goldenV5Step, 0, 1, sh)
	cut.Release()
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint.Manifest{Step: goldenV5Step, Time: time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC), Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: 1, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
	if err := checkpoint.WriteManifest(vfs.OS, goldenV5Dir, m); err != nil {
		t.Fatal(err)
	}
}

// The committed format-5 checkpoint is what it says (version 5, the shard
// Indexed, keys in any order, an index tensor and its mask), and restores
// onto one ps, read into memory or mapped, to exactly the file's rows; an
// index that this program would not have built (its slots moved a bucket
// on, as a changed hash or bucket layout would leave them) is refused by
// its check and the rows restore all the same, the index built again.
// TestGoldenCheckpointsRestore restores it onto 1 and 3 ps too.
func TestGoldenV5(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") == "1" {
		t.Skip("rewriting")
	}
	m, err := checkpoint.Load(vfs.OS, goldenV5Dir, goldenV5Step)
	if err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != checkpoint.IndexFormatVersion || !m.Shards[0].Indexed || !m.Shards[0].AnyOrder {
		t.Fatalf("format_version %d, indexed %v, any order %v; want %d, true, true", m.FormatVersion, m.Shards[0].Indexed, m.Shards[0].AnyOrder, checkpoint.IndexFormatVersion)
	}
	file, err := checkpoint.ReadShard(vfs.OS, goldenV5Dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	ix, ok := savedIndex(&file, "emb")
	if !ok {
		t.Fatal("no index in the golden shard")
	}
	keys, err := file.Uint64s("emb/keys")
	if err != nil || len(keys) != goldenV5Rows {
		t.Fatalf("%d keys (%v), want %d", len(keys), err, goldenV5Rows)
	}
	want := goldenTensors(t, goldenV5Dir, m)
	for _, mapped := range []bool{false, true} {
		st, _, err := restoreOneFrom(m, goldenV5Dir, mapped, mapped)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		collect(t, goldenShardOf(t, st), got)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("mapped %v: the restored rows differ from the file's", mapped)
		}
	}

	// An index placed otherwise: the table refuses it, and the restore
	// builds its own, which finds every key.
	ref := restoredTable(t, m, file)
	tb, err := sparse.New(sparse.Config{Dim: 1, Rule: ref.rule})
	if err != nil {
		t.Fatal(err)
	}
	snap := sparse.Snapshot{Dim: 1, Keys: keys}
	if snap.Values, err = file.Float32s("emb/values"); err != nil {
		t.Fatal(err)
	}
	for _, slot := range SlotNames(ref.rule.Name(), ref.rule.StateSlots()) {
		col, err := file.Float32s(ckptformat.SlotName("emb", slot))
		if err != nil {
			t.Fatal(err)
		}
		snap.State = append(snap.State, col)
	}
	moved := append(append([]uint32(nil), ix.Slots[16:]...), ix.Slots[:16]...)
	if err := tb.ImportIndexed(snap, sparse.SavedIndex{Slots: moved, RowMask: ix.RowMask}); !errors.Is(err, sparse.ErrIndex) {
		t.Fatalf("an index moved a bucket on: %v, want ErrIndex", err)
	}
	spoilt := file
	spoilt.Tensors = slices.Clone(file.Tensors)
	for i, tn := range spoilt.Tensors {
		if tn.Name == ckptformat.IndexName("emb") {
			spoilt.Tensors[i].Data = append(slices.Clone(tn.Data[64:]), tn.Data[:64]...)
		}
	}
	tr := restoredTable(t, m, spoilt)
	for _, k := range keys {
		if !tr.t.Has(k) {
			t.Fatalf("with the index built again, key %d is not found", k)
		}
	}
	got := map[string][]byte{}
	collect(t, tr.snapshot(t), got)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("with the index built again, the restored rows differ from the file's")
	}
}

// restoredTable restores the golden v5 checkpoint m onto one ps from its
// shard file f and returns its table, with a snapshot of the shard.
func restoredTable(t *testing.T, m checkpoint.Manifest, f checkpoint.Shard) goldenTable {
	t.Helper()
	st, err := Restore(contentsOf(m), func(int) (*checkpoint.Shard, error) { return &f, nil }, 0, 1, 1, testRunner)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	tb := st.tables["emb"]
	return goldenTable{table: tb, sh: goldenShardOf(t, st)}
}

type goldenTable struct {
	*table
	sh checkpoint.Shard
}

func (g goldenTable) snapshot(*testing.T) checkpoint.Shard { return g.sh }

// goldenShardOf is the checkpoint shard of st, in key order.
func goldenShardOf(t *testing.T, st *State) checkpoint.Shard {
	t.Helper()
	sh := New(Config{Task: 0, NumPS: 1, NumWorkers: 1})
	sh.Install(st)
	if sh.Step() != goldenV5Step {
		t.Fatalf("restored step %d, want %d", sh.Step(), goldenV5Step)
	}
	return sh.Snapshot()
}
