package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// The checkpoints in testdata/golden-v1 were written by this package as of
// format version 1 (issue 12), by
//
//	PARAMSERV_WRITE_GOLDEN=1 go test -run TestWriteGolden ./internal/checkpoint/
//
// and are committed, so that every later version of the readers is tested
// against files an older writer produced: checkpoints of today's jobs must
// still load. Do not regenerate them to make a test pass; add a
// golden-v<N> next to them when the format changes.
const goldenDir = "testdata/golden-v1"

// goldenF32 are float32 values that catch a reader that converts, rounds
// or reorders: signed zeros, infinities, a NaN with a payload, a
// subnormal, and the extremes.
var goldenF32 = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 0.1, -2.5e-7, 3.4028235e38, -3.4028235e38,
	float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc0beef), math.Float32frombits(1),
	1.17549435e-38, 123456.78, -0.33333334, 2,
}

// f32s returns n values cycling through goldenF32 from offset off.
func f32s(n, off int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = goldenF32[(off+i)%len(goldenF32)]
	}
	return v
}

// goldenCheckpoints are the checkpoints in goldenDir: what the servers of
// two jobs of today's paramserv write, an asynchronous one with FTRL and a
// synchronous one with Adam, each on 2 ps.
func goldenCheckpoints() []struct {
	m      Manifest
	shards []Shard
} {
	tables := `[{"name":"emb","dim":2,"initializer":"normal","init_stddev":0.01,"seed":7,"evict_after_steps":1000}]`
	ftrl := Manifest{
		Step: 100, Time: time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC), Mode: "async", NumPS: 2, NumWorkers: 3,
		Optimizer: json.RawMessage(`{"name":"ftrl","learning_rate":0.05,"initial_accumulator":0.1,"ftrl_beta":1,"l1":0.001,"l2":0.0001}`),
		Variables: []VariableInfo{
			{Name: "bias", Shape: []int64{}, Slots: []string{"ftrl_n", "ftrl_z"}, Parts: []Part{{Shard: 1}}},
		},
		Tables: []TableInfo{{Name: "emb", Dim: 2, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0, 1}}},
		Meta: map[string]string{
			"replicas_to_aggregate": "0", "max_staleness": "50", "split_bytes": "1048576",
			"sync_timeout_ms": "0", "sync_proceed": "false", "tables": tables,
		},
	}
	ftrlShards := []Shard{{
		Step: 100,
		Tensors: []Tensor{
			Uint64Tensor("emb/keys", []int64{3}, []uint64{2, 1 << 40, math.MaxUint64}),
			Float32Tensor("emb/values", []int64{3, 2}, f32s(6, 0)),
			Float32Tensor("emb/ftrl_n", []int64{3, 2}, f32s(6, 6)),
			Float32Tensor("emb/ftrl_z", []int64{3, 2}, f32s(6, 12)),
			Int64Tensor("emb/last_touch", []int64{3}, []int64{99, 100, 1}),
		},
	}, {
		Step: 98, // async: cut two steps behind
		Tensors: []Tensor{
			Float32Tensor("bias", []int64{}, []float32{-0.75}),
			Float32Tensor("bias/ftrl_n", []int64{}, []float32{0.5}),
			Float32Tensor("bias/ftrl_z", []int64{}, []float32{-1.25}),
			Uint64Tensor("emb/keys", []int64{2}, []uint64{1, 3}),
			Float32Tensor("emb/values", []int64{2, 2}, f32s(4, 3)),
			Float32Tensor("emb/ftrl_n", []int64{2, 2}, f32s(4, 7)),
			Float32Tensor("emb/ftrl_z", []int64{2, 2}, f32s(4, 11)),
			Int64Tensor("emb/last_touch", []int64{2}, []int64{math.MinInt64, math.MaxInt64}),
		},
		Meta: map[string]string{"updates/bias": "98"},
	}}
	ftrlShards[0].Meta = map[string]string{}

	adam := Manifest{
		Step: 200, Time: time.Date(2026, 11, 24, 20, 1, 40, 123456789, time.UTC), Mode: "sync", NumPS: 2, NumWorkers: 2,
		Optimizer: json.RawMessage(`{"name":"adam","learning_rate":0.001,"beta1":0.9,"beta2":0.999,"epsilon":1e-8}`),
		Variables: []VariableInfo{
			{Name: "hid_w", Shape: []int64{3, 2}, Slots: []string{"adam_m", "adam_v"},
				Parts: []Part{{Shard: 0, Rows: []int64{0, 2}}, {Shard: 1, Rows: []int64{2, 3}}}},
			{Name: "out_b", Shape: []int64{2}, Slots: []string{"adam_m", "adam_v"}, Parts: []Part{{Shard: 1}}},
		},
		Tables: []TableInfo{{Name: "emb", Dim: 2, Slots: []string{"adam_m", "adam_v"}, Shards: []int{0, 1}}},
		Meta: map[string]string{
			"replicas_to_aggregate": "2", "max_staleness": "0", "split_bytes": "16",
			"sync_timeout_ms": "60000", "sync_proceed": "true",
			"tables": `[{"name":"emb","dim":2,"seed":1,"min_count":2}]`,
		},
	}
	adamShards := []Shard{{
		Step: 200,
		Tensors: []Tensor{
			Float32Tensor("hid_w", []int64{2, 2}, f32s(4, 1)),
			Float32Tensor("hid_w/adam_m", []int64{2, 2}, f32s(4, 5)),
			Float32Tensor("hid_w/adam_v", []int64{2, 2}, f32s(4, 9)),
			Uint64Tensor("emb/keys", []int64{1}, []uint64{10}),
			Float32Tensor("emb/values", []int64{1, 2}, f32s(2, 13)),
			Float32Tensor("emb/adam_m", []int64{1, 2}, f32s(2, 2)),
			Float32Tensor("emb/adam_v", []int64{1, 2}, f32s(2, 4)),
			Int64Tensor("emb/updates", []int64{1}, []int64{200}),
		},
		Meta: map[string]string{"updates/hid_w": "200"},
	}, {
		Step: 200,
		Tensors: []Tensor{
			Float32Tensor("hid_w", []int64{1, 2}, f32s(2, 8)),
			Float32Tensor("hid_w/adam_m", []int64{1, 2}, f32s(2, 10)),
			Float32Tensor("hid_w/adam_v", []int64{1, 2}, f32s(2, 12)),
			Float32Tensor("out_b", []int64{2}, f32s(2, 14)),
			Float32Tensor("out_b/adam_m", []int64{2}, f32s(2, 0)),
			Float32Tensor("out_b/adam_v", []int64{2}, f32s(2, 15)),
			Uint64Tensor("emb/keys", []int64{0}, []uint64{}),
			Float32Tensor("emb/values", []int64{0, 2}, []float32{}),
			Float32Tensor("emb/adam_m", []int64{0, 2}, []float32{}),
			Float32Tensor("emb/adam_v", []int64{0, 2}, []float32{}),
			Int64Tensor("emb/updates", []int64{0}, []int64{}),
		},
		Meta: map[string]string{"updates/hid_w": "200", "updates/out_b": "199"},
	}}
	return []struct {
		m      Manifest
		shards []Shard
	}{{ftrl, ftrlShards}, {adam, adamShards}}
}

// goldenFiles are the sizes and SHA-256s of the committed shard files, as
// the manifests record them.
var goldenFiles = map[string]struct {
	size int64
	sum  string
}{
	"ckpt-100/shard-0-of-2.safetensors": {584, "abb5cd5eaeb659f9c60b9221fef5dc7c4188367829e1100572499b37760c1f2b"},
	"ckpt-100/shard-1-of-2.safetensors": {756, "2db49143e9ccfa05724110023e3187843019680d4b6d4d1a7ad3c481689bec2f"},
	"ckpt-200/shard-0-of-2.safetensors": {760, "ef81d392bbd2af1d500bfe3ebbc27c0d8ee2a4d81dc5ea83b2d8cc8910f36219"},
	"ckpt-200/shard-1-of-2.safetensors": {928, "7f80ccf4bd86c1980ec70a0b3ccfdec026f400bf82551592a21ec4fe3c1671a9"},
}

// TestWriteGolden writes testdata/golden-v1; it runs only when asked.
func TestWriteGolden(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") != "1" {
		t.Skip("set PARAMSERV_WRITE_GOLDEN=1 to rewrite " + goldenDir)
	}
	if err := os.RemoveAll(goldenDir); err != nil {
		t.Fatal(err)
	}
	for _, g := range goldenCheckpoints() {
		m := g.m
		for k, s := range g.shards {
			info, err := WriteShard(vfs.OS, goldenDir, m.Step, k, len(g.shards), s)
			if err != nil {
				t.Fatal(err)
			}
			m.Shards = append(m.Shards, info)
			t.Logf("%s/%s: %d bytes, sha256 %s", CheckpointName(m.Step), info.File, info.Size, info.SHA256)
		}
		if err := WriteManifest(vfs.OS, goldenDir, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGolden reads the committed checkpoints with today's readers and
// checks every manifest field and every tensor bit for bit.
func TestGolden(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") == "1" {
		t.Skip("rewriting")
	}
	m, skipped, err := Latest(vfs.OS, goldenDir)
	if err != nil || m.Step != 200 || len(skipped) != 0 {
		t.Fatalf("Latest = %d, %v, %v", m.Step, skipped, err)
	}
	for _, g := range goldenCheckpoints() {
		t.Run(CheckpointName(g.m.Step), func(t *testing.T) {
			got, err := Load(vfs.OS, goldenDir, g.m.Step)
			if err != nil {
				t.Fatal(err)
			}
			want := g.m
			want.FormatVersion = 1
			for k, s := range g.shards {
				file := ShardFileName(k, len(g.shards))
				gf, ok := goldenFiles[CheckpointName(g.m.Step)+"/"+file]
				if !ok {
					t.Fatalf("no recorded size and sha256 for %s", file)
				}
				info := ShardInfo{Index: k, File: file, Size: gf.size, SHA256: gf.sum, Step: s.Step}
				for _, tn := range fileOrder(s.Tensors) {
					info.Tensors = append(info.Tensors, tn.Info())
				}
				want.Shards = append(want.Shards, info)
			}
			// Optimizer is compared as JSON bytes, less the indentation
			// the writer gives the manifest.
			var opt bytes.Buffer
			if err := json.Compact(&opt, got.Optimizer); err != nil || !bytes.Equal(opt.Bytes(), want.Optimizer) {
				t.Errorf("optimizer %s, want %s (%v)", got.Optimizer, want.Optimizer, err)
			}
			got.Optimizer, want.Optimizer = nil, nil
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("manifest differs:\ngot  %s\nwant %s", gj, wj)
			}
			m, err := Load(vfs.OS, goldenDir, g.m.Step) // with its Optimizer
			if err != nil {
				t.Fatal(err)
			}
			for k, ws := range g.shards {
				s, err := ReadShard(vfs.OS, goldenDir, m, k)
				if err != nil {
					t.Fatal(err)
				}
				if s.Step != ws.Step || !reflect.DeepEqual(s.Meta, nilIfEmpty(ws.Meta)) {
					t.Errorf("shard %d: step %d meta %v, want %d %v", k, s.Step, s.Meta, ws.Step, ws.Meta)
				}
				wt := fileOrder(ws.Tensors)
				if len(s.Tensors) != len(wt) {
					t.Fatalf("shard %d: %d tensors, want %d", k, len(s.Tensors), len(wt))
				}
				for i, w := range wt {
					g := s.Tensors[i]
					if g.Name != w.Name || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
						t.Errorf("shard %d tensor %d: got %s %s %v %x, want %s %s %v %x", k, i, g.Name, g.DType, g.Shape, g.Data, w.Name, w.DType, w.Shape, w.Data)
					}
				}
				// The typed accessors too, against a decoding of the
				// expected bytes that does not use them.
				for _, w := range wt {
					var got []uint64
					var err error
					switch w.DType {
					case F32:
						var v []float32
						v, err = s.Float32s(w.Name)
						for _, x := range v {
							got = append(got, uint64(math.Float32bits(x)))
						}
					case I64:
						var v []int64
						v, err = s.Int64s(w.Name)
						for _, x := range v {
							got = append(got, uint64(x))
						}
					case U64:
						got, err = s.Uint64s(w.Name)
					}
					var want []uint64
					size := w.DType.Size()
					for i := 0; i+size <= len(w.Data); i += size {
						var x uint64
						for j := size - 1; j >= 0; j-- {
							x = x<<8 | uint64(w.Data[i+j])
						}
						want = append(want, x)
					}
					if err != nil || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
						t.Errorf("%s values %x, %v; want %x", w.Name, got, err, want)
					}
				}
			}
		})
	}
	// A tripwire on the writer: today's writer still produces these very
	// bytes (the format is fixed; its layout is part of it).
	t.Run("writer", func(t *testing.T) {
		for _, g := range goldenCheckpoints() {
			for k, s := range g.shards {
				path := filepath.Join(goldenDir, CheckpointName(g.m.Step), ShardFileName(k, len(g.shards)))
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				fsys := vfs.NewMem()
				if _, err := WriteShard(fsys, "d", g.m.Step, k, len(g.shards), s); err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, fsys, filepath.Join("d", CheckpointName(g.m.Step), ShardFileName(k, len(g.shards)))); !bytes.Equal(got, want) {
					sum := sha256.Sum256(got)
					t.Errorf("%s: the writer now writes %d bytes with sha256 %s, not the committed file's", path, len(got), hex.EncodeToString(sum[:]))
				}
			}
		}
		if b, err := os.ReadFile(filepath.Join(goldenDir, "ckpt-200", ManifestName)); err != nil || !strings.Contains(string(b), `"format_version": 1,`) {
			t.Errorf("manifest: %v", err)
		}
	})
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
