package checkpoint

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// The checkpoints in testdata/golden-v4 were written by this package as of
// format version 4 (AnyOrderFormatVersion, issue 30), by
//
//	PARAMSERV_WRITE_GOLDEN=1 go test -run TestWriteGoldenV4 ./internal/checkpoint/
//
// and are committed so that later readers are tested against them: a full
// checkpoint whose shards hold their table's keys in the order a ps's
// memory held them (not ascending), and a delta on it. Do not regenerate
// them to make a test pass.
const goldenV4Dir = "testdata/golden-v4"

// goldenV4 is the full checkpoint at step 300 (2 ps, FTRL, keys in any
// order) and the delta at step 310 on it: shard 0 drops key 7, changes key
// 1<<40 and adds keys 3 and 9; shard 1 is unchanged but for its bias.
func goldenV4() (full Manifest, fullShards []Shard, delta Manifest, deltaShards []Shard) {
	slots := []string{"ftrl_n", "ftrl_z"}
	full = Manifest{
		Step: 300, Time: time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC), Mode: "async", NumPS: 2, NumWorkers: 1,
		Optimizer: json.RawMessage(`{"name":"ftrl","learning_rate":0.05}`),
		Variables: []VariableInfo{{Name: "bias", Shape: []int64{}, Slots: slots, Parts: []Part{{Shard: 1}}}},
		Tables:    []TableInfo{{Name: "w", Dim: 1, Slots: slots, Shards: []int{0, 1}}},
		Meta:      map[string]string{"tables": `[{"name":"w","dim":1}]`},
	}
	table := func(keys []uint64, off int) []Tensor {
		n := int64(len(keys))
		return []Tensor{
			Uint64Tensor("w/keys", []int64{n}, keys),
			Float32Tensor("w/values", []int64{n, 1}, f32s(len(keys), off)),
			Float32Tensor("w/ftrl_n", []int64{n, 1}, f32s(len(keys), off+5)),
			Float32Tensor("w/ftrl_z", []int64{n, 1}, f32s(len(keys), off+9)),
		}
	}
	fullShards = []Shard{
		{Step: 300, AnyOrder: true, Tensors: table([]uint64{math.MaxUint64, 7, 1 << 40, 2}, 0), Meta: map[string]string{}},
		{Step: 300, AnyOrder: true, Tensors: append(table([]uint64{5, 1}, 3),
			Float32Tensor("bias", []int64{}, []float32{-0.75}),
			Float32Tensor("bias/ftrl_n", []int64{}, []float32{0.5}),
			Float32Tensor("bias/ftrl_z", []int64{}, []float32{-1.25})),
			Meta: map[string]string{"updates/bias": "300"}},
	}
	delta = full
	delta.Step, delta.Time = 310, full.Time.Add(time.Minute)
	delta.Kind, delta.Parent, delta.Base = KindDelta, 300, 300
	deltaShards = []Shard{
		{Step: 310, Delta: true, Parent: 300, Tensors: append(table([]uint64{3, 9, 1 << 40}, 11),
			Uint64Tensor("w/deleted", []int64{1}, []uint64{7})), Meta: map[string]string{}},
		{Step: 310, Delta: true, Parent: 300, Tensors: append(table(nil, 0),
			Uint64Tensor("w/deleted", []int64{0}, []uint64{}),
			Float32Tensor("bias", []int64{}, []float32{0.25}),
			Float32Tensor("bias/ftrl_n", []int64{}, []float32{0.75}),
			Float32Tensor("bias/ftrl_z", []int64{}, []float32{-1})),
			Meta: map[string]string{"updates/bias": "310"}},
	}
	return full, fullShards, delta, deltaShards
}

// TestWriteGoldenV4 writes testdata/golden-v4; it runs only when asked.
func TestWriteGoldenV4(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") != "1" {
		t.Skip("set PARAMSERV_WRITE_GOLDEN=1 to rewrite " + goldenV4Dir)
	}
	if err := os.RemoveAll(goldenV4Dir); err != nil {
		t.Fatal(err)
	}
	full, fs, delta, ds := goldenV4()
	for _, c := range []struct {
		m      Manifest
		shards []Shard
	}{{full, fs}, {delta, ds}} {
		m := c.m
		for k, s := range c.shards {
			info, err := WriteShard(vfs.OS, goldenV4Dir, m.Step, k, len(c.shards), s)
			if err != nil {
				t.Fatal(err)
			}
			m.Shards = append(m.Shards, info)
		}
		if err := WriteManifest(vfs.OS, goldenV4Dir, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoldenV4 reads the committed checkpoints of keys in any order: the
// full one as it was written, tensor for tensor, with the manifest's and
// the files' marks; the delta applied on it (the base's rows in its order,
// the deleted key gone, the changed row in its place, the new keys after);
// and in key order (InKeyOrder), as a reader that needs it sorts them.
func TestGoldenV4(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") == "1" {
		t.Skip("rewriting")
	}
	full, fs, _, _ := goldenV4()
	m, skipped, err := Latest(vfs.OS, goldenV4Dir)
	if err != nil || m.Step != 310 || len(skipped) != 0 {
		t.Fatalf("Latest = %d, %v, %v", m.Step, skipped, err)
	}
	b, err := os.ReadFile(goldenV4Dir + "/ckpt-300/" + ManifestName)
	if err != nil || !strings.Contains(string(b), `"format_version": 4,`) || !strings.Contains(string(b), `"keys_any_order": true`) {
		t.Fatalf("ckpt-300's manifest: %v\n%s", err, b)
	}
	fm, err := Load(vfs.OS, goldenV4Dir, full.Step)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got Shard, want []Tensor, anyOrder bool) {
		t.Helper()
		if got.AnyOrder != anyOrder {
			t.Errorf("%s: AnyOrder %v, want %v", what, got.AnyOrder, anyOrder)
		}
		if err := DiffTensors(got, Shard{Tensors: want}); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	for k, s := range fs {
		if !fm.Shards[k].AnyOrder {
			t.Errorf("ckpt-300 shard %d: not marked AnyOrder in the manifest", k)
		}
		got, err := ReadShard(vfs.OS, goldenV4Dir, fm, k)
		if err != nil {
			t.Fatal(err)
		}
		check("ckpt-300 shard "+ShardFileName(k, 2), got, s.Tensors, true)
	}
	// The delta on it.
	applied, err := ReadShard(vfs.OS, goldenV4Dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := func(keys []uint64, vals []float32) []Tensor {
		n := int64(len(keys))
		return []Tensor{Uint64Tensor("w/keys", []int64{n}, keys), Float32Tensor("w/values", []int64{n, 1}, vals)}
	}
	v0, v1 := f32s(4, 0), f32s(3, 11) // the base's values, the delta's
	wantApplied := w([]uint64{math.MaxUint64, 1 << 40, 2, 3, 9}, []float32{v0[0], v1[2], v0[3], v1[0], v1[1]})
	got := Shard{}
	for _, tn := range applied.Tensors {
		if tn.Name == "w/keys" || tn.Name == "w/values" {
			got.Tensors = append(got.Tensors, tn)
		}
	}
	check("ckpt-310 shard 0 (base + delta)", Shard{Tensors: got.Tensors, AnyOrder: applied.AnyOrder}, wantApplied, true)
	sorted, err := InKeyOrder(applied, m.Tables)
	if err != nil {
		t.Fatal(err)
	}
	got.Tensors = got.Tensors[:0]
	for _, tn := range sorted.Tensors {
		if tn.Name == "w/keys" || tn.Name == "w/values" {
			got.Tensors = append(got.Tensors, tn)
		}
	}
	check("ckpt-310 shard 0 in key order", Shard{Tensors: got.Tensors, AnyOrder: sorted.AnyOrder},
		w([]uint64{2, 3, 9, 1 << 40, math.MaxUint64}, []float32{v0[3], v1[0], v1[1], v1[2], v0[0]}), false)
	if s1, err := ReadShard(vfs.OS, goldenV4Dir, m, 1); err != nil {
		t.Fatal(err)
	} else if bias, _ := s1.Float32s("bias"); !reflect.DeepEqual(bias, []float32{0.25}) {
		t.Errorf("ckpt-310 shard 1 bias %v, want [0.25]", bias)
	} else if keys, _ := s1.Uint64s("w/keys"); !reflect.DeepEqual(keys, []uint64{5, 1}) {
		t.Errorf("ckpt-310 shard 1 keys %v, want [5 1] (the base's, in its order)", keys)
	}
	// A tripwire on the writer: it still writes these bytes.
	for k, s := range fs {
		path := goldenV4Dir + "/ckpt-300/" + ShardFileName(k, 2)
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fsys := vfs.NewMem()
		if _, err := WriteShard(fsys, "d", 300, k, 2, s); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, fsys, "d/ckpt-300/"+ShardFileName(k, 2)); !bytes.Equal(got, want) {
			t.Errorf("%s: the writer now writes other bytes", path)
		}
	}
}
