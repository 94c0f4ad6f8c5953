package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

const testDir = "ckpts"

// testShards is the content of a two-server job at step: a dense variable
// with Adam state on each server and a sparse table split across both.
func testShards(step int64) []Shard {
	x := float32(step) / 100
	negZero := float32(math.Copysign(0, -1))
	nan := math.Float32frombits(0x7fc0beef) // a NaN with a payload
	return []Shard{{
		Step: step,
		Tensors: []Tensor{
			Float32Tensor("hid_w", []int64{2, 3}, []float32{x, -x, negZero, nan, 1, 2}),
			Float32Tensor("hid_w/adam_m", []int64{2, 3}, []float32{0.1, 0.2, 0.3, 0.4, 0.5, x}),
			Float32Tensor("hid_w/adam_v", []int64{2, 3}, []float32{1, 1, 1, 1, 1, x}),
			Uint64Tensor("emb/keys", []int64{3}, []uint64{2, 4, math.MaxUint64}),
			Float32Tensor("emb/values", []int64{3, 2}, []float32{1, 2, 3, 4, 5, x}),
			Float32Tensor("emb/adagrad", []int64{3, 2}, []float32{0.1, 0.1, 0.1, 0.1, 0.1, 0.1}),
			Int64Tensor("emb/updates", []int64{3}, []int64{1, 2, step}),
		},
		Meta: map[string]string{"ps": "0"},
	}, {
		Step: step - 1, // async: this server cut one step earlier
		Tensors: []Tensor{
			Float32Tensor("out_b", []int64{2}, []float32{x, 0}),
			Float32Tensor("out_b/adam_m", []int64{2}, []float32{0, 0}),
			Float32Tensor("out_b/adam_v", []int64{2}, []float32{0, 0}),
			Uint64Tensor("emb/keys", []int64{2}, []uint64{1, 3}),
			Float32Tensor("emb/values", []int64{2, 2}, []float32{-1, -2, -3, x}),
			Float32Tensor("emb/adagrad", []int64{2, 2}, []float32{0.1, 0.1, 0.1, 0.1}),
			Int64Tensor("emb/updates", []int64{2}, []int64{7, step}),
		},
	}}
}

func testManifest(step int64, shards []ShardInfo) Manifest {
	return Manifest{
		Step:       step,
		Time:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(step) * time.Second),
		Mode:       "async",
		NumPS:      2,
		NumWorkers: 4,
		Optimizer:  json.RawMessage(`{"name":"adam","learning_rate":0.001}`),
		Shards:     shards,
		Variables: []VariableInfo{
			{Name: "hid_w", Shape: []int64{2, 3}, Slots: []string{"adam_m", "adam_v"}, Parts: []Part{{Shard: 0}}},
			{Name: "out_b", Shape: []int64{2}, Slots: []string{"adam_m", "adam_v"}, Parts: []Part{{Shard: 1}}},
		},
		Tables: []TableInfo{{Name: "emb", Dim: 2, Slots: []string{"adagrad", "updates"}, Shards: []int{0, 1}}},
	}
}

// save writes a whole checkpoint as the servers and the chief would.
func save(fsys vfs.FS, dir string, step int64) (Manifest, error) {
	shards := testShards(step)
	infos := make([]ShardInfo, len(shards))
	for k, s := range shards {
		info, err := WriteShard(fsys, dir, step, k, len(shards), s)
		if err != nil {
			return Manifest{}, err
		}
		infos[k] = info
	}
	m := testManifest(step, infos)
	return m, WriteManifest(fsys, dir, m)
}

func mustSave(t *testing.T, fsys vfs.FS, dir string, step int64) Manifest {
	t.Helper()
	m, err := save(fsys, dir, step)
	if err != nil {
		t.Fatalf("save step %d: %v", step, err)
	}
	return m
}

// checkContent reads every shard of m and compares it bit for bit with
// what testShards(m.Step) wrote.
func checkContent(t *testing.T, fsys vfs.FS, dir string, m Manifest) {
	t.Helper()
	for k, want := range testShards(m.Step) {
		got, err := ReadShard(fsys, dir, m, k)
		if err != nil {
			t.Fatalf("ReadShard %d: %v", k, err)
		}
		if got.Step != want.Step || len(got.Tensors) != len(want.Tensors) {
			t.Fatalf("shard %d: step %d with %d tensors, want %d with %d", k, got.Step, len(got.Tensors), want.Step, len(want.Tensors))
		}
		if len(want.Meta) > 0 && fmt.Sprint(got.Meta) != fmt.Sprint(want.Meta) {
			t.Errorf("shard %d meta %v, want %v", k, got.Meta, want.Meta)
		}
		byName := got.ByName()
		for _, w := range want.Tensors {
			g := byName[w.Name]
			if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
				t.Errorf("shard %d tensor %q: got %s %v %x, want %s %v %x", k, w.Name, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
			}
		}
	}
}

// forEachFS runs a test over the in-memory fake and the real disk.
func forEachFS(t *testing.T, test func(t *testing.T, fsys vfs.FS, dir string)) {
	t.Run("mem", func(t *testing.T) { test(t, vfs.NewMem(), testDir) })
	t.Run("os", func(t *testing.T) { test(t, vfs.OS, filepath.Join(t.TempDir(), testDir)) })
}

func readAll(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func overwrite(t *testing.T, fsys vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func shardPath(dir string, step int64, k int) string {
	return filepath.Join(dir, CheckpointName(step), ShardFileName(k, 2))
}

func manifestPath(dir string, step int64) string {
	return filepath.Join(dir, CheckpointName(step), ManifestName)
}

// latestStep returns Latest's step and its skipped list as strings.
func latestStep(t *testing.T, fsys vfs.FS, dir string) (int64, []string) {
	t.Helper()
	m, skipped, err := Latest(fsys, dir)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	var s []string
	for _, sk := range skipped {
		s = append(s, sk.String())
	}
	return m.Step, s
}

func TestRoundTrip(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		mustSave(t, fsys, dir, 400)
		want := mustSave(t, fsys, dir, 500)
		m, skipped, err := Latest(fsys, dir)
		if err != nil || len(skipped) != 0 {
			t.Fatalf("Latest = %v, %v", skipped, err)
		}
		if m.Step != 500 || m.Shards[1].Step != 499 || m.Rows("emb") != 5 || !m.Time.Equal(want.Time) {
			t.Fatalf("manifest %+v", m)
		}
		var opt bytes.Buffer
		if err := json.Compact(&opt, m.Optimizer); err != nil || opt.String() != `{"name":"adam","learning_rate":0.001}` {
			t.Fatalf("optimizer %s", m.Optimizer)
		}
		checkContent(t, fsys, dir, m)
		// Everything under the checkpoint has its final name.
		des, err := fsys.ReadDir(filepath.Join(dir, "ckpt-500"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		if got := strings.Join(names, " "); got != "manifest.json shard-0-of-2.safetensors shard-1-of-2.safetensors" {
			t.Fatalf("ckpt-500 holds %s", got)
		}
		if got, err := Load(fsys, dir, 400); err != nil || got.Step != 400 {
			t.Fatalf("Load(400) = %v, %v", got.Step, err)
		}
	})
}

func TestShardBytesIndependentOfTensorOrder(t *testing.T) {
	fsys := vfs.NewMem()
	s := testShards(500)[0]
	a, err := WriteShard(fsys, "a", 500, 0, 2, s)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(s.Tensors)
	b, err := WriteShard(fsys, "b", 500, 0, 2, s)
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 {
		t.Fatal("the same tensors in another order gave another file")
	}
	if a.Tensors[0].Name != "emb/keys" || a.Tensors[1].Name != "emb/updates" {
		t.Fatalf("file order %v: want the 8-byte dtypes first", a.Tensors)
	}
}

func TestLatestEmpty(t *testing.T) {
	fsys := vfs.NewMem()
	if _, _, err := Latest(fsys, "nowhere"); !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Latest of a missing directory: %v", err)
	}
	if err := fsys.MkdirAll("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Latest(fsys, "empty"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Latest of an empty directory: %v", err)
	}
}

// TestDiskFullMidShard: the disk fills up while a shard is written. The
// save fails with the disk's error, leaves no file under a final name, and
// the previous checkpoint is still the latest.
func TestDiskFullMidShard(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	big := make([]float32, 700_000) // 2.8 MB: several writes through the 1 MiB buffer
	s := Shard{Step: 500, Tensors: []Tensor{Float32Tensor("big", []int64{int64(len(big))}, big)}}
	full := vfs.FailFrom(vfs.OpWrite, 2, syscall.ENOSPC)
	fsys.SetInjector(full)
	_, err := WriteShard(fsys, testDir, 500, 0, 2, s)
	fsys.SetInjector(nil)
	if !full.Fired() {
		t.Fatal("the shard took fewer than 2 writes; the test does not test anything")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") ||
		!strings.Contains(err.Error(), "shard-0-of-2.safetensors") {
		t.Fatalf("WriteShard on a full disk: %v", err)
	}
	t.Logf("error: %v", err)
	for _, name := range []string{shardPath(testDir, 500, 0), shardPath(testDir, 500, 0) + ".tmp", manifestPath(testDir, 500)} {
		if _, err := fsys.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after the failed save", name)
		}
	}
	step, skipped := latestStep(t, fsys, testDir)
	if step != 400 || len(skipped) != 1 || skipped[0] != "ckpt-500 incomplete: no manifest.json" {
		t.Fatalf("Latest = %d, skipped %q", step, skipped)
	}
}

// TestCrashBeforeRename: the process dies after writing the temporary file,
// before renaming it. After the crash nothing of the new shard is visible.
func TestCrashBeforeRename(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	fsys.SetInjector(vfs.FailFrom(vfs.OpRename, 1, nil)) // dies at the rename
	if _, err := save(fsys, testDir, 500); err == nil {
		t.Fatal("save succeeded")
	}
	fsys.SetInjector(nil)
	fsys.Crash()
	if _, err := fsys.Stat(shardPath(testDir, 500, 0)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("shard visible after a crash before its rename:\n%s", fsys.Dump())
	}
	if step, _ := latestStep(t, fsys, testDir); step != 400 {
		t.Fatalf("Latest = %d, want 400", step)
	}
}

// TestCrashBeforeManifest: every shard is renamed into place and durable,
// but the chief dies before the manifest. The checkpoint is not visible.
func TestCrashBeforeManifest(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	for k, s := range testShards(500) {
		if _, err := WriteShard(fsys, testDir, 500, k, 2, s); err != nil {
			t.Fatal(err)
		}
	}
	fsys.Crash()
	if _, err := fsys.Stat(shardPath(testDir, 500, 1)); err != nil {
		t.Fatalf("a shard written and synced was lost: %v", err)
	}
	step, skipped := latestStep(t, fsys, testDir)
	if step != 400 || len(skipped) != 1 || skipped[0] != "ckpt-500 incomplete: no manifest.json" {
		t.Fatalf("Latest = %d, skipped %q", step, skipped)
	}
}

// TestCrashManifestNotSynced: the manifest is renamed into place, but the
// directory fsync fails and the machine crashes: the rename is lost and the
// checkpoint with it.
func TestCrashManifestNotSynced(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	renamed := false // the manifest has been renamed into place
	fsys.SetInjector(vfs.InjectorFunc(func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpRename && strings.HasSuffix(name, ManifestName+".tmp"):
			renamed = true
		case op == vfs.OpSyncDir && renamed:
			return syscall.EIO
		}
		return nil
	}))
	_, err := save(fsys, testDir, 500)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("save: %v, want EIO", err)
	}
	fsys.SetInjector(nil)
	fsys.Crash()
	if step, _ := latestStep(t, fsys, testDir); step != 400 {
		t.Fatalf("Latest = %d, want 400", step)
	}
}

// TestCrashAnywhere cuts a save of step 500 followed by Prune(keep=1) short
// before each of its operations in turn, crashes, and checks that Latest
// then returns either the previous checkpoint or the new one, intact; and
// the new one whenever the save had returned.
func TestCrashAnywhere(t *testing.T) {
	for n := 1; ; n++ {
		fsys := vfs.NewMem()
		mustSave(t, fsys, testDir, 400)
		die := vfs.FailFrom(vfs.AnyOp, n, nil)
		fsys.SetInjector(die)
		_, saveErr := save(fsys, testDir, 500)
		if saveErr == nil {
			_, saveErr = Prune(fsys, testDir, 1)
		}
		fsys.SetInjector(nil)
		fsys.Crash()
		m, skipped, err := Latest(fsys, testDir)
		if err != nil {
			t.Fatalf("dying at operation %d: Latest: %v\n%s", n, err, fsys.Dump())
		}
		switch {
		case m.Step != 400 && m.Step != 500:
			t.Fatalf("dying at operation %d: Latest = %d", n, m.Step)
		case saveErr == nil && m.Step != 500:
			t.Fatalf("dying at operation %d: the save returned nil, but after the crash Latest = %d (skipped %v)\n%s", n, m.Step, skipped, fsys.Dump())
		}
		checkContent(t, fsys, testDir, m)
		if !die.Fired() {
			t.Logf("a save and prune takes %d operations; each was cut short in turn", n-1)
			return
		}
	}
}

// TestFailOnceAnywhere fails each operation of a save once (no crash): the
// save either fails or succeeds, Latest is always 400 or 500, and a retry
// of the save after a failure completes the checkpoint.
func TestFailOnceAnywhere(t *testing.T) {
	for n := 1; ; n++ {
		fsys := vfs.NewMem()
		mustSave(t, fsys, testDir, 400)
		fault := vfs.FailNth(vfs.AnyOp, n, syscall.EIO)
		fsys.SetInjector(fault)
		_, err := save(fsys, testDir, 500)
		fsys.SetInjector(nil)
		if step, _ := latestStep(t, fsys, testDir); step != 400 && step != 500 {
			t.Fatalf("failing operation %d: Latest = %d", n, step)
		}
		if err != nil {
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("failing operation %d: error %v does not wrap the cause", n, err)
			}
			if _, err := save(fsys, testDir, 500); err != nil && !errors.Is(err, ErrExists) {
				t.Fatalf("failing operation %d: retry: %v", n, err)
			}
		}
		m, _, err := Latest(fsys, testDir)
		if err != nil || m.Step != 500 {
			t.Fatalf("failing operation %d: after retry Latest = %d, %v", n, m.Step, err)
		}
		checkContent(t, fsys, testDir, m)
		if !fault.Fired() {
			return
		}
	}
}

// TestDamaged damages the newest of two checkpoints in each way a disk or a
// person can, and checks that Latest falls back to the older one, says why,
// and that ReadShard refuses the damaged data.
func TestDamaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, fsys vfs.FS, dir string)
		kind   error
		want   string
	}{{
		name: "flipped bit in data",
		damage: func(t *testing.T, fsys vfs.FS, dir string) {
			b := readAll(t, fsys, shardPath(dir, 500, 1))
			b[len(b)-3] ^= 0x10
			overwrite(t, fsys, shardPath(dir, 500, 1), b)
		},
		kind: ErrChecksum,
		want: "ckpt-500 damaged: shard-1-of-2.safetensors: checksum mismatch: file has CRC-32C ",
	}, {
		name: "garbage header",
		damage: func(t *testing.T, fsys vfs.FS, dir string) {
			b := readAll(t, fsys, shardPath(dir, 500, 0))
			copy(b[8:], "{{{{")
			overwrite(t, fsys, shardPath(dir, 500, 0), b)
		},
		kind: ErrChecksum,
		want: "ckpt-500 damaged: shard-0-of-2.safetensors: checksum mismatch",
	}, {
		name: "truncated shard",
		damage: func(t *testing.T, fsys vfs.FS, dir string) {
			b := readAll(t, fsys, shardPath(dir, 500, 0))
			overwrite(t, fsys, shardPath(dir, 500, 0), b[:len(b)/2])
		},
		kind: ErrSize,
		want: "ckpt-500 damaged: shard-0-of-2.safetensors: truncated: ",
	}, {
		name: "missing shard",
		damage: func(t *testing.T, fsys vfs.FS, dir string) {
			if err := fsys.Remove(shardPath(dir, 500, 1)); err != nil {
				t.Fatal(err)
			}
		},
		kind: fs.ErrNotExist,
		want: "ckpt-500 damaged: shard-1-of-2.safetensors: missing",
	}, {
		name: "manifest not JSON",
		damage: func(t *testing.T, fsys vfs.FS, dir string) {
			b := readAll(t, fsys, manifestPath(dir, 500))
			overwrite(t, fsys, manifestPath(dir, 500), b[:len(b)-10])
		},
		kind: ErrFormat,
		want: "ckpt-500 damaged: manifest.json: unexpected end of JSON input",
	}, {
		name:   "manifest of a newer format",
		damage: editManifest(func(m *Manifest) { m.FormatVersion = IndexFormatVersion + 1 }),
		kind:   ErrVersion,
		want:   "ckpt-500 damaged: manifest.json: format_version 6 is newer than this program reads (5)",
	}, {
		name:   "manifest in the wrong directory",
		damage: editManifest(func(m *Manifest) { m.Step = 501 }),
		kind:   ErrMismatch,
		want:   "ckpt-500 damaged: manifest.json: step 501 in the directory for step 500",
	}, {
		name:   "manifest disagrees with the shard's step",
		damage: editManifest(func(m *Manifest) { m.Shards[1].Step = 500 }),
		kind:   ErrMismatch,
		want:   `ckpt-500 damaged: shard-1-of-2.safetensors: metadata paramserv.step is "499", manifest implies "500"`,
	}, {
		// A variable's tensor of another dtype is refused by the manifest
		// check, before any file is read (before, the manifest passed, ckpt
		// ls said ok and the ps restoring it exited 1).
		name: "a variable's tensor not F32",
		damage: editManifest(func(m *Manifest) {
			m.Shards[1].Tensors[5].DType = I64
		}),
		kind: ErrFormat,
		want: `ckpt-500 damaged: manifest.json: variable "out_b": shard-1-of-2.safetensors tensor "out_b/adam_m" is I64, want F32`,
	}, {
		name: "an optimizer record that does not read",
		damage: editManifest(func(m *Manifest) {
			m.Optimizer = json.RawMessage(`{"name":` + strings.Repeat(`{"a":`, 3000) + `1` + strings.Repeat(`}`, 3001))
		}),
		kind: ErrFormat,
		want: `ckpt-500 damaged: manifest.json: checkpoint of step 500: optimizer`,
	}, {
		name:   "manifest inconsistent",
		damage: editManifest(func(m *Manifest) { m.Variables[0].Parts[0].Shard = 1 }),
		kind:   ErrFormat,
		want:   `ckpt-500 damaged: manifest.json: variable "hid_w": shard-1-of-2.safetensors has no tensor "hid_w"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				mustSave(t, fsys, dir, 400)
				m500 := mustSave(t, fsys, dir, 500)
				tc.damage(t, fsys, dir)
				m, skipped, err := Latest(fsys, dir)
				if err != nil {
					t.Fatal(err)
				}
				if m.Step != 400 || len(skipped) != 1 {
					t.Fatalf("Latest = %d, skipped %v; want 400 and ckpt-500 skipped", m.Step, skipped)
				}
				if !errors.Is(skipped[0].Err, tc.kind) || !strings.HasPrefix(skipped[0].String(), tc.want) {
					t.Fatalf("skipped: %v\nwant %v starting %q", skipped[0], tc.kind, tc.want)
				}
				t.Logf("%v; using ckpt-%d", skipped[0], m.Step)
				checkContent(t, fsys, dir, m)
				if _, err := Load(fsys, dir, 500); !errors.Is(err, tc.kind) {
					t.Errorf("Load(500) = %v, want %v", err, tc.kind)
				}
				// Reading the damaged checkpoint through its (original)
				// manifest fails, and never with data.
				var failed bool
				for k := range m500.Shards {
					s, err := ReadShard(fsys, dir, m500, k)
					if err != nil {
						failed = true
						if s.Tensors != nil {
							t.Errorf("ReadShard %d returned data with its error", k)
						}
					}
				}
				// (A damaged manifest leaves the files readable through
				// the original one.)
				if !failed && strings.Contains(tc.name, "shard") && !strings.HasPrefix(tc.name, "manifest") {
					t.Errorf("ReadShard of a damaged shard succeeded")
				}
			})
		})
	}
}

// editManifest returns a damage function that rewrites ckpt-500's manifest.
func editManifest(edit func(*Manifest)) func(t *testing.T, fsys vfs.FS, dir string) {
	return func(t *testing.T, fsys vfs.FS, dir string) {
		var m Manifest
		if err := json.Unmarshal(readAll(t, fsys, manifestPath(dir, 500)), &m); err != nil {
			t.Fatal(err)
		}
		edit(&m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		overwrite(t, fsys, manifestPath(dir, 500), b)
	}
}

func TestAllDamaged(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	if err := fsys.Remove(manifestPath(testDir, 400)); err != nil {
		t.Fatal(err)
	}
	_, skipped, err := Latest(fsys, testDir)
	if !errors.Is(err, ErrNotFound) || len(skipped) != 1 || !strings.Contains(err.Error(), "ckpt-400 incomplete: no manifest.json") {
		t.Fatalf("Latest = %v, %v", skipped, err)
	}
}

func TestWriteRefusals(t *testing.T) {
	fsys := vfs.NewMem()
	m := mustSave(t, fsys, testDir, 500)
	s := testShards(500)[0]
	if _, err := WriteShard(fsys, testDir, 500, 0, 2, s); !errors.Is(err, ErrExists) {
		t.Errorf("WriteShard into a complete checkpoint: %v, want ErrExists", err)
	}
	if err := WriteManifest(fsys, testDir, m); !errors.Is(err, ErrExists) {
		t.Errorf("WriteManifest twice: %v, want ErrExists", err)
	}
	for _, tc := range []struct {
		name    string
		step    int64
		k, n    int
		s       Shard
		wantErr string
	}{
		{"k out of range", 1, 2, 2, s, "shard 2 of 2"},
		{"negative step", -1, 0, 1, s, "step -1"},
		{"reserved meta", 1, 0, 1, Shard{Meta: map[string]string{"paramserv.step": "1"}}, `"paramserv." is reserved`},
		{"bad tensor", 1, 0, 1, Shard{Tensors: []Tensor{{Name: "w", DType: F32, Shape: []int64{2}}}}, `tensor "w": shape [2] of F32 needs 8 bytes, data has 0`},
	} {
		if _, err := WriteShard(fsys, testDir, tc.step, tc.k, tc.n, tc.s); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestWriteManifestChecks(t *testing.T) {
	fsys := vfs.NewMem()
	var infos []ShardInfo
	for k, s := range testShards(500) {
		info, err := WriteShard(fsys, testDir, 500, k, 2, s)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	for _, tc := range []struct {
		name string
		edit func(*Manifest)
		kind error
		want string
	}{
		{"no shards", func(m *Manifest) { m.Shards = nil }, ErrInvalid, "no shards"},
		{"shards out of order", func(m *Manifest) { m.Shards[0], m.Shards[1] = m.Shards[1], m.Shards[0] }, ErrInvalid, "shards[0] has index 1"},
		{"bad checksum", func(m *Manifest) { m.Shards[0].Checksum = "crc32c-4m:xyz" }, ErrInvalid, `checksum "crc32c-4m:xyz": want crc32c-4m:<64 lower-case hex digits>`},
		{"unknown checksum", func(m *Manifest) { m.Shards[0].Checksum = "md5:00" }, ErrInvalid, `unknown kind "md5"`},
		{"bad sha256", func(m *Manifest) { m.Shards[0].Checksum, m.Shards[0].SHA256 = "", "xyz" }, ErrInvalid, `sha256 "xyz" is not 64 lower-case hex digits`},
		{"two checksums", func(m *Manifest) { m.Shards[0].SHA256 = strings.Repeat("0", 64) }, ErrInvalid, "both sha256 and checksum are set"},
		{"crc in version 2", func(m *Manifest) { m.FormatVersion = DeltaFormatVersion }, ErrInvalid, "format version 2 (this writer writes 3 for a full checkpoint)"},
		{"size differs", func(m *Manifest) { m.Shards[1].Size++ }, ErrSize, "shard-1-of-2.safetensors is "},
		{"unknown shard", func(m *Manifest) { m.Tables[0].Shards = []int{0, 2} }, ErrInvalid, `table "emb": shard 2 out of range [0,2)`},
		{"missing slot", func(m *Manifest) { m.Variables[1].Slots = []string{"rms"} }, ErrInvalid, `variable "out_b": shard-1-of-2.safetensors has no tensor "out_b/rms"`},
		{"wrong shape", func(m *Manifest) { m.Variables[0].Shape = []int64{3, 2} }, ErrInvalid, `variable "hid_w": shard-0-of-2.safetensors tensor "hid_w" has shape [2 3], want [3 2]`},
		{"wrong dim", func(m *Manifest) { m.Tables[0].Dim = 3 }, ErrInvalid, `table "emb": shard-0-of-2.safetensors values are F32 [3 2], want F32 [3 3]`},
		{"duplicate name", func(m *Manifest) { m.Tables[0].Name = "hid_w" }, ErrInvalid, `table "hid_w": empty or repeated name`},
		{"bad optimizer", func(m *Manifest) { m.Optimizer = json.RawMessage("{") }, ErrInvalid, "optimizer is not valid JSON"},
		{"parts with gap", func(m *Manifest) {
			m.Variables[0].Parts = []Part{{Shard: 0, Rows: []int64{0, 2}}, {Shard: 1, Rows: []int64{3, 3}}}
		}, ErrInvalid, `variable "hid_w": part 1 rows [3 3] do not continue from row 2`},
		{"future version", func(m *Manifest) { m.FormatVersion = 9 }, ErrInvalid, "format version 9"},
	} {
		m := testManifest(500, slices.Clone(infos))
		m.Shards = []ShardInfo{infos[0], infos[1]}
		m.Variables = slices.Clone(m.Variables)
		m.Tables = slices.Clone(m.Tables)
		tc.edit(&m)
		err := WriteManifest(fsys, testDir, m)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %v saying %q", tc.name, err, tc.kind, tc.want)
		}
	}
	if _, err := fsys.Stat(manifestPath(testDir, 500)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a rejected manifest was written")
	}
}

func TestSplitVariable(t *testing.T) {
	fsys := vfs.NewMem()
	var infos []ShardInfo
	for k, rows := range [][]float32{{1, 2}, {3, 4, 5, 6}} {
		s := Shard{Step: 7, Tensors: []Tensor{Float32Tensor("w", []int64{int64(len(rows)) / 2, 2}, rows)}}
		info, err := WriteShard(fsys, testDir, 7, k, 2, s)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	m := Manifest{Step: 7, Shards: infos, Variables: []VariableInfo{{
		Name: "w", Shape: []int64{3, 2},
		Parts: []Part{{Shard: 0, Rows: []int64{0, 1}}, {Shard: 1, Rows: []int64{1, 3}}},
	}}}
	if err := WriteManifest(fsys, testDir, m); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Latest(fsys, testDir); err != nil {
		t.Fatal(err)
	}
}

func TestPrune(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		for step := int64(100); step <= 800; step += 100 {
			mustSave(t, fsys, dir, step)
		}
		// An old interrupted save, a damaged one in the middle, and a
		// save in progress newer than everything.
		for _, step := range []int64{150, 900} {
			if _, err := WriteShard(fsys, dir, step, 0, 2, testShards(step)[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := fsys.Remove(shardPath(dir, 700, 1)); err != nil {
			t.Fatal(err)
		}
		removed, err := Prune(fsys, dir, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(removed, " "); got != "ckpt-700 ckpt-400 ckpt-300 ckpt-200 ckpt-150 ckpt-100" {
			t.Fatalf("removed %s", got)
		}
		ents, err := list(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, e := range ents {
			left = append(left, e.name)
		}
		if got := strings.Join(left, " "); got != "ckpt-900 ckpt-800 ckpt-600 ckpt-500" {
			t.Fatalf("left %s", got)
		}
		if removed, err := Prune(fsys, dir, 3); err != nil || len(removed) != 0 {
			t.Fatalf("second Prune removed %v, %v", removed, err)
		}
		removed, err = Prune(fsys, dir, 0) // DefaultKeep
		if err != nil || len(removed) != 0 {
			t.Fatalf("Prune(0) removed %v, %v", removed, err)
		}
		if step, _ := latestStep(t, fsys, dir); step != 800 {
			t.Fatalf("Latest = %d", step)
		}
	})
}

// TestConcurrentShards writes the shards of one checkpoint from concurrent
// goroutines, as the servers do, under the race detector.
func TestConcurrentShards(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		shards := testShards(500)
		infos := make([]ShardInfo, len(shards))
		errs := make([]error, len(shards))
		var wg sync.WaitGroup
		for k, s := range shards {
			wg.Go(func() { infos[k], errs[k] = WriteShard(fsys, dir, 500, k, len(shards), s) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if err := WriteManifest(fsys, dir, testManifest(500, infos)); err != nil {
			t.Fatal(err)
		}
		m, _, err := Latest(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		checkContent(t, fsys, dir, m)
	})
}
