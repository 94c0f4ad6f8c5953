package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// goldenFile reads a file of testdata/golden-v1.
func goldenFile(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, rel))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// knownKind reports whether err is one of the package's kinds (or a
// missing file), as every reader error must be.
func knownKind(err error) bool {
	for _, k := range []error{ErrInvalid, ErrFormat, ErrVersion, ErrSize, ErrChecksum, ErrMismatch, ErrIncomplete, ErrNotFound, fs.ErrNotExist} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// FuzzManifest feeds arbitrary manifest.json files, next to the intact
// shard files of golden-v1's ckpt-100, to the readers. They must never
// panic; an error must name the file at fault and be of a known kind; and
// a manifest they accept must be consistent and its shards readable.
func FuzzManifest(f *testing.F) {
	for _, step := range []string{"ckpt-100", "ckpt-200"} {
		f.Add(goldenFile(f, step+"/"+ManifestName))
	}
	f.Add([]byte(`{"format_version":1,"step":100,"shards":[]}`))
	f.Add([]byte(`{"format_version":1,"step":100,"shards":[{"index":0,"file":"shard-0-of-1.safetensors","size":8,"sha256":"00"}],"variables":[{"name":"w","shape":[],"parts":[{"shard":0,"rows":[0,1]}]}]}`))
	f.Add([]byte(`{"format_version":2}`))
	f.Add([]byte(`null`))
	shards := [][]byte{
		goldenFile(f, "ckpt-100/"+ShardFileName(0, 2)),
		goldenFile(f, "ckpt-100/"+ShardFileName(1, 2)),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := vfs.NewMem()
		cdir := filepath.Join("d", CheckpointName(100))
		if err := fsys.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		put := func(name string, b []byte) {
			f, err := fsys.Create(filepath.Join(cdir, name))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(b)
			f.Close()
		}
		put(ManifestName, data)
		for k, b := range shards {
			put(ShardFileName(k, 2), b)
		}
		m, err := Load(fsys, "d", 100)
		if err != nil {
			if !knownKind(err) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if !strings.Contains(err.Error(), ManifestName) && !strings.Contains(err.Error(), ".safetensors") {
				t.Fatalf("error names no file: %v", err)
			}
			if m.FormatVersion != 0 || m.Shards != nil {
				t.Fatalf("Load returned a manifest with its error: %+v", m)
			}
		} else {
			if err := m.Validate(); err != nil {
				t.Fatalf("Load accepted a manifest that does not validate: %v", err)
			}
			for k := range m.Shards {
				if _, err := ReadShard(fsys, "d", m, k); err != nil {
					t.Fatalf("Load accepted a checkpoint whose shard %d does not read: %v", k, err)
				}
			}
			for _, tb := range m.Tables {
				if m.Rows(tb.Name) < 0 {
					t.Fatalf("table %q has %d rows", tb.Name, m.Rows(tb.Name))
				}
			}
		}
		// The other readers of the directory agree and do not panic.
		lm, _, lerr := Latest(fsys, "d")
		if (lerr == nil) != (err == nil) || (err == nil && lm.Step != m.Step) {
			t.Fatalf("Latest = %d, %v; Load = %v", lm.Step, lerr, err)
		}
		if l, err := List(fsys, "d"); err != nil || len(l.Entries) != 1 {
			t.Fatalf("List = %+v, %v", l, err)
		} else {
			_ = l.String()
		}
		if _, err := Prune(fsys, "d", 1); err != nil {
			t.Fatalf("Prune: %v", err)
		}
	})
}

// FuzzSafetensors feeds arbitrary shard files to ReadShard, under a
// manifest that records their true size and checksum (so the parser, not
// the checksum, must catch what is wrong). It must never panic; an error
// must name the file and be of a known kind; and what it accepts must be
// exactly what the file holds.
func FuzzSafetensors(f *testing.F) {
	for _, p := range []string{"ckpt-100/shard-0-of-2.safetensors", "ckpt-100/shard-1-of-2.safetensors",
		"ckpt-200/shard-0-of-2.safetensors", "ckpt-200/shard-1-of-2.safetensors"} {
		f.Add(goldenFile(f, p))
	}
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<62))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 8), `{}      `...))
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "shard-0-of-1.safetensors"
		fsys := vfs.NewMem()
		cdir := filepath.Join("d", CheckpointName(1))
		if err := fsys.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := fsys.Create(filepath.Join(cdir, file))
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		sum := sha256.Sum256(data)
		si := ShardInfo{File: file, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		// Describe the file as it says it is, when it parses, so that a
		// well-formed file reaches the end of the reader.
		h, tensors, derr := DecodeSafetensors(bytes.NewReader(data), int64(len(data)))
		if derr == nil {
			for _, e := range h.Tensors {
				si.Tensors = append(si.Tensors, e.TensorInfo)
			}
			if h.Meta[metaNumShards] == "1" && h.Meta[metaShard] == "0" {
				si.Step = parseStep(h.Meta[metaStep])
			}
		}
		m := Manifest{FormatVersion: 1, Step: 1, Shards: []ShardInfo{si}}
		s, err := ReadShard(fsys, "d", m, 0)
		if err != nil {
			if !knownKind(err) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if !strings.Contains(err.Error(), file) {
				t.Fatalf("error does not name the file: %v", err)
			}
			if s.Tensors != nil {
				t.Fatal("ReadShard returned data with its error")
			}
			return
		}
		if derr != nil {
			t.Fatalf("ReadShard accepted a file DecodeSafetensors refuses (%v)", derr)
		}
		if len(s.Tensors) != len(tensors) {
			t.Fatalf("%d tensors, the file has %d", len(s.Tensors), len(tensors))
		}
		var n int64
		for i, tn := range s.Tensors {
			w := tensors[i]
			if tn.Name != w.Name || tn.DType != w.DType || !slices.Equal(tn.Shape, w.Shape) || !bytes.Equal(tn.Data, w.Data) {
				t.Fatalf("tensor %d differs from the file's", i)
			}
			n += int64(len(tn.Data))
		}
		if n > int64(len(data)) {
			t.Fatalf("%d bytes of tensors from a %d-byte file", n, len(data))
		}
	})
}

func parseStep(s string) int64 {
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' || n > (math.MaxInt64-9)/10 {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	if s == "" {
		return -1
	}
	return n
}

// TestHugeHeaderRefusedBeforeAllocating: a header length of 2^62 (or any
// length past the limit or the file) is refused before a byte is
// allocated for it, however large the caller says the file is.
func TestHugeHeaderRefusedBeforeAllocating(t *testing.T) {
	for _, tc := range []struct {
		n, size uint64
		kind    error
	}{
		{1 << 62, 1<<62 + 8, ErrFormat},
		{math.MaxUint64, math.MaxInt64, ErrFormat},
		{MaxHeaderSize + 1, 1 << 40, ErrFormat},
		{MaxHeaderSize, 1000, ErrSize}, // within the limit, past the file
	} {
		hdr := binary.LittleEndian.AppendUint64(nil, tc.n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := ReadHeader(bytes.NewReader(hdr), int64(tc.size))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, tc.kind) {
			t.Errorf("header length %d in a %d-byte file: %v, want %v", tc.n, tc.size, err, tc.kind)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("header length %d: %d bytes allocated before refusing", tc.n, got)
		}
	}
}
