package checkpoint

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/ckptformat"
	"github.com/paramserv/paramserv/internal/vfs"
)

// tableShard is a one-shard checkpoint's shard: a dense variable "w" and a
// table "t" of dim 2 with one slot, "t/acc", and per-row counts.
func tableShard(step int64, w float32, rows map[uint64]float32) Shard {
	var keys []uint64
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var vals, acc []float32
	var upd []int64
	for _, k := range keys {
		vals = append(vals, rows[k], -rows[k])
		acc = append(acc, 2*rows[k], 3*rows[k])
		upd = append(upd, int64(k))
	}
	n := int64(len(keys))
	return Shard{Step: step, Meta: map[string]string{"updates/w": "1"}, Tensors: []Tensor{
		Float32Tensor("w", []int64{2}, []float32{w, w}),
		Uint64Tensor("t/keys", []int64{n}, keys),
		Float32Tensor("t/values", []int64{n, 2}, vals),
		Float32Tensor("t/acc", []int64{n, 2}, acc),
		Int64Tensor("t/updates", []int64{n}, upd),
	}}
}

// deltaOf is tableShard of the changed rows, with the deleted keys, and
// "w" only if changed.
func deltaOf(step, parent int64, w *float32, rows map[uint64]float32, deleted ...uint64) Shard {
	s := tableShard(step, 0, rows)
	s.Tensors = s.Tensors[1:]
	if w != nil {
		s.Tensors = append(s.Tensors, Float32Tensor("w", []int64{2}, []float32{*w, *w}))
	}
	s.Tensors = append(s.Tensors, Uint64Tensor("t/deleted", []int64{int64(len(deleted))}, deleted))
	s.Delta, s.Parent = true, parent
	return s
}

// saveOne writes a one-shard checkpoint at step.
func saveOne(t *testing.T, fsys vfs.FS, dir string, step int64, s Shard, base int64) Manifest {
	t.Helper()
	info, err := WriteShard(fsys, dir, step, 0, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Step: step, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []ShardInfo{info},
		Variables: []VariableInfo{{Name: "w", Shape: []int64{2}, Parts: []Part{{Shard: 0}}}},
		Tables:    []TableInfo{{Name: "t", Dim: 2, Slots: []string{"acc", "updates"}, Shards: []int{0}}}}
	if s.Delta {
		m.Kind, m.Parent, m.Base = KindDelta, s.Parent, base
	}
	if err := WriteManifest(fsys, dir, m); err != nil {
		t.Fatal(err)
	}
	m, err = Load(fsys, dir, step)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// chainDir writes full 10, delta 20 (changes w, row 2, adds 5, deletes 3),
// delta 30 (row 5 again, deletes 1 and 2, re-adds 3).
func chainDir(t *testing.T) (vfs.FS, string) {
	fsys, dir := vfs.NewMem(), "/ckpt"
	saveOne(t, fsys, dir, 10, tableShard(10, 1, map[uint64]float32{1: 1, 2: 2, 3: 3, 4: 4}), 0)
	w := float32(7)
	saveOne(t, fsys, dir, 20, deltaOf(20, 10, &w, map[uint64]float32{2: 20, 5: 5}, 3), 10)
	saveOne(t, fsys, dir, 30, deltaOf(30, 20, nil, map[uint64]float32{5: 50, 3: 30}, 1, 2, 3), 10)
	return fsys, dir
}

// ReadShard applies the chain: the result is byte for byte the full shard
// of the same state.
func TestReadShardAppliesChain(t *testing.T) {
	fsys, dir := chainDir(t)
	m, skipped, err := Latest(fsys, dir)
	if err != nil || m.Step != 30 || len(skipped) != 0 || !m.IsDelta() || m.FormatVersion != ChecksumFormatVersion {
		t.Fatalf("Latest = %d %s v%d, %v, %v", m.Step, m.KindName(), m.FormatVersion, skipped, err)
	}
	got, err := ReadShard(fsys, dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := tableShard(30, 7, map[uint64]float32{3: 30, 4: 4, 5: 50})
	if err := DiffTensors(got, want); err != nil || got.Delta || got.Step != 30 || got.Meta["updates/w"] != "1" {
		t.Fatalf("base + deltas: %v (delta %v, step %d, meta %v)", err, got.Delta, got.Step, got.Meta)
	}
	// The file alone is the delta.
	raw, err := ReadShardFile(fsys, dir, m, 0)
	if err != nil || !raw.Delta || raw.Parent != 20 {
		t.Fatalf("ReadShardFile: delta %v of %d, %v", raw.Delta, raw.Parent, err)
	}
}

// A damaged link makes every checkpoint built on it unusable: Latest falls
// back to the newest complete chain and says which link broke, and
// LatestSetAside sets the whole broken chain aside.
func TestLatestFallsBackFromBrokenChain(t *testing.T) {
	fsys, dir := chainDir(t)
	path := filepath.Join(dir, "ckpt-20", ShardFileName(0, 1))
	b := readAll(t, fsys, path)
	b[len(b)-1] ^= 1
	overwrite(t, fsys, path, b)
	m, skipped, err := LatestSetAside(fsys, dir)
	if err != nil || m.Step != 10 || len(skipped) != 2 {
		t.Fatalf("Latest = %d, skipped %v, %v; want 10", m.Step, skipped, err)
	}
	if !errors.Is(skipped[0].Err, ErrChain) || !strings.HasPrefix(skipped[0].String(), "ckpt-30 damaged: ckpt-30 is a delta of ckpt-20, which is damaged: shard-0-of-1.safetensors: checksum mismatch") {
		t.Errorf("skipped[0] = %v", skipped[0])
	}
	if !errors.Is(skipped[1].Err, ErrChecksum) || skipped[0].SetAside == "" || skipped[1].SetAside == "" {
		t.Errorf("skipped = %v", skipped)
	}
}

// Prune never removes a checkpoint a kept delta needs.
func TestPruneKeepsChain(t *testing.T) {
	fsys, dir := chainDir(t)
	saveOne(t, fsys, dir, 5, tableShard(5, 1, map[uint64]float32{1: 1}), 0)
	removed, err := Prune(fsys, dir, 1)
	if err != nil || !slices.Equal(removed, []string{"ckpt-5"}) {
		t.Fatalf("Prune(1) removed %v, %v; want only ckpt-5", removed, err)
	}
	w := float32(8)
	saveOne(t, fsys, dir, 40, tableShard(40, w, map[uint64]float32{9: 9}), 0)
	removed, err = Prune(fsys, dir, 1)
	if err != nil || !slices.Equal(removed, []string{"ckpt-30", "ckpt-20", "ckpt-10"}) {
		t.Fatalf("Prune(1) after a full save removed %v, %v", removed, err)
	}
}

// A program that reads only format 1 refuses a delta checkpoint instead of
// restoring the delta as the whole state: its manifest says version 2 or
// later (3, as every checkpoint written with chunked CRC-32C checksums is).
func TestDeltaFormatVersion(t *testing.T) {
	fsys, dir := chainDir(t)
	for step, want := range map[int64]int{10: ChecksumFormatVersion, 20: ChecksumFormatVersion} {
		var m struct {
			FormatVersion int `json:"format_version"`
		}
		if err := json.Unmarshal(readAll(t, fsys, manifestPath(dir, step)), &m); err != nil || m.FormatVersion != want {
			t.Errorf("ckpt-%d: format_version %d, %v; want %d", step, m.FormatVersion, err, want)
		}
	}
	// A manifest that says delta must have delta shards and a parent.
	m, err := Load(fsys, dir, 20)
	if err != nil {
		t.Fatal(err)
	}
	m.Parent = 20
	if err := m.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a delta that is its own parent: %v", err)
	}
}

// Applying a chain in one pass gives what applying its deltas one by one
// gives, and both what a plain map of the rows holds: random rows, random
// deletions, keys deleted and added again in one delta and across deltas.
func TestApplyDeltasMatchesOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tables := []TableInfo{{Name: "t", Dim: 2}}
	for trial := range 50 {
		rows := map[uint64]float32{}
		for range rng.IntN(30) {
			rows[rng.Uint64N(40)] = rng.Float32()
		}
		base := tableShard(0, 1, rows)
		var ds []Shard
		for j := range 1 + rng.IntN(5) {
			var deleted []uint64
			for range rng.IntN(8) {
				k := rng.Uint64N(40)
				if !slices.Contains(deleted, k) {
					deleted = append(deleted, k)
				}
				delete(rows, k)
			}
			slices.Sort(deleted)
			changed := map[uint64]float32{}
			for range rng.IntN(8) {
				k := rng.Uint64N(40)
				changed[k] = rng.Float32()
				rows[k] = changed[k]
			}
			w := float32(j)
			ds = append(ds, deltaOf(int64(j+1), int64(j), &w, changed, deleted...))
		}
		want := tableShard(int64(len(ds)), float32(len(ds)-1), rows)
		got, err := applyDeltas(base, ds, tables)
		if err != nil {
			t.Fatal(err)
		}
		one := base
		for _, d := range ds {
			if one, err = ApplyDelta(one, d, tables); err != nil {
				t.Fatal(err)
			}
		}
		for what, s := range map[string]Shard{"in one pass": got, "one by one": one} {
			if err := DiffTensors(s, want); err != nil {
				t.Fatalf("trial %d: the chain applied %s: %v", trial, what, err)
			}
		}
	}
}

// A full shard that holds a table's index beside its rows (Indexed,
// format version 5) reads back with it; a delta applied to it gives the
// shard the same chain without the index gives (the index held for the
// base's rows only: dropped, with its metadata), and a shard whose keys
// ascend cannot claim one.
func TestIndexedBaseOfADelta(t *testing.T) {
	write := func(dir string, indexed bool) {
		t.Helper()
		full, fs, delta, ds := goldenV4()
		if indexed {
			fs[0].Indexed = true
			fs[0].Tensors = append(fs[0].Tensors, Uint64Tensor(IndexName("w"), []int64{8}, []uint64{1, 2, 3, 4, 0, 0, 0, 0}))
			fs[0].Meta[ckptformat.IndexMaskMeta("w")] = "15"
		}
		for _, c := range []struct {
			m      Manifest
			shards []Shard
		}{{full, fs}, {delta, ds}} {
			m := c.m
			for k, s := range c.shards {
				info, err := WriteShard(vfs.OS, dir, m.Step, k, len(c.shards), s)
				if err != nil {
					t.Fatal(err)
				}
				m.Shards = append(m.Shards, info)
			}
			if err := WriteManifest(vfs.OS, dir, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	plain, indexed := t.TempDir(), t.TempDir()
	write(plain, false)
	write(indexed, true)
	full, err := Load(vfs.OS, indexed, 300)
	if err != nil {
		t.Fatal(err)
	}
	if full.FormatVersion != IndexFormatVersion || !full.Shards[0].Indexed || full.Shards[1].Indexed {
		t.Fatalf("format_version %d, shards indexed %v %v; want %d, true, false", full.FormatVersion, full.Shards[0].Indexed, full.Shards[1].Indexed, IndexFormatVersion)
	}
	base, err := ReadShard(vfs.OS, indexed, full, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.Lookup(IndexName("w")); err != nil || !base.Indexed {
		t.Fatalf("the full shard read back without its index: %v", err)
	}
	for _, dir := range []string{plain, indexed} {
		m, err := Load(vfs.OS, dir, 310)
		if err != nil {
			t.Fatal(err)
		}
		m0, err := Load(vfs.OS, plain, 310)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadShard(vfs.OS, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ReadShard(vfs.OS, plain, m0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := DiffTensors(got, want); err != nil || got.Indexed {
			t.Fatalf("the delta on the indexed base: %v (indexed %v)", err, got.Indexed)
		}
		if _, ok := got.Meta[ckptformat.IndexMaskMeta("w")]; ok {
			t.Fatal("the delta's result kept the base's index metadata")
		}
	}
	_, fs, _, _ := goldenV4()
	fs[0].AnyOrder, fs[0].Indexed = false, true
	if _, err := WriteShard(vfs.OS, t.TempDir(), 300, 0, 2, fs[0]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an index in a shard whose keys ascend: %v, want ErrInvalid", err)
	}
}
