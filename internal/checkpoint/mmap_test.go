package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// hashAll, which checksums a chunked CRC's pieces on every core, sums what
// writing the bytes in order sums, for either kind of checksum.
func TestHashAllMatchesWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, size := range []int{0, 1, crcChunk - 1, crcChunk, 2 * crcChunk, 2*crcChunk + 5, 5*crcChunk + crcChunk/2} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		h := newChunkCRC()
		_ = hashAll(h, b, nil)
		if got, want := hex.EncodeToString(h.Sum(nil)), chunkCRCOf(b); got != want {
			t.Errorf("%d bytes: chunked CRC %s, want %s", size, got, want)
		}
		s := sha256.New()
		_ = hashAll(s, b, nil)
		if got, want := s.Sum(nil), sha256.Sum256(b); !reflect.DeepEqual(got, want[:]) {
			t.Errorf("%d bytes: SHA-256 %x, want %x", size, got, want)
		}
	}
}

// mappedShard is a shard of about 2.5 checksum pieces, of each dtype, with
// the manifest of its checkpoint at step 9 under dir.
func mappedShard(t *testing.T, fsys vfs.FS, dir string) (Shard, Manifest) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	n := 5 * crcChunk / 2 / 16
	keys := make([]uint64, n)
	vals := make([]float32, 2*n)
	upd := make([]int64, n)
	for i := range keys {
		keys[i] = uint64(i) * 3
		upd[i] = rng.Int64()
	}
	for i := range vals {
		vals[i] = rng.Float32()
	}
	s := Shard{Step: 9, Meta: map[string]string{"x": "y"}, Tensors: []Tensor{
		Uint64Tensor(KeysName("emb"), []int64{int64(n)}, keys),
		Float32Tensor(ValuesName("emb"), []int64{int64(n), 2}, vals),
		Int64Tensor(SlotName("emb", "updates"), []int64{int64(n)}, upd),
	}}
	info, err := WriteShard(fsys, dir, 9, 0, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Step: 9, NumPS: 1, NumWorkers: 1, Shards: []ShardInfo{info},
		Tables: []TableInfo{{Name: "emb", Dim: 2, Slots: []string{"updates"}, Shards: []int{0}}}}
	if err := WriteManifest(fsys, dir, m); err != nil {
		t.Fatal(err)
	}
	if m, err = Load(fsys, dir, 9); err != nil {
		t.Fatal(err)
	}
	return s, m
}

// ReadShardMapped returns what ReadShard returns, bit for bit, from the
// real disk (mapped) and from the in-memory fake (read), and refuses a
// damaged or truncated file as ReadShard does, with nothing to release.
func TestReadShardMapped(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		s, m := mappedShard(t, fsys, dir)
		path := filepath.Join(dir, CheckpointName(9), m.Shards[0].File)
		if f, err := fsys.Open(path); err != nil {
			t.Fatal(err)
		} else {
			_, unmap, ok := mapFile(f, m.Shards[0].Size)
			f.Close()
			if wantOK := fsys == vfs.OS && runtime.GOOS != "windows"; ok != wantOK {
				t.Fatalf("mapFile mapped %v, want %v", ok, wantOK)
			}
			if ok {
				unmap()
			}
		}
		read, err := ReadShard(fsys, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, release, err := ReadShardMapped(fsys, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := DiffTensors(got, s); err != nil {
			t.Error(err)
		}
		if !reflect.DeepEqual(got.Tensors, read.Tensors) || !reflect.DeepEqual(got.Meta, read.Meta) || got.Step != read.Step {
			t.Error("ReadShardMapped and ReadShard differ")
		}
		release()
		release() // twice is allowed

		file := readAll(t, fsys, path)
		for _, off := range []int{100, crcChunk + 5, 2*crcChunk + 17, len(file) - 1} {
			bad := append([]byte(nil), file...)
			bad[off] ^= 0x10
			overwrite(t, fsys, path, bad)
			_, release, err := ReadShardMapped(fsys, dir, m, 0)
			if !errors.Is(err, ErrChecksum) {
				t.Errorf("bit flipped at byte %d: ReadShardMapped says %v, want ErrChecksum", off, err)
			}
			release()
		}
		overwrite(t, fsys, path, file[:len(file)-8])
		if _, release, err := ReadShardMapped(fsys, dir, m, 0); !errors.Is(err, ErrSize) {
			t.Errorf("truncated: ReadShardMapped says %v, want ErrSize", err)
		} else {
			release()
		}
		if _, _, err := ReadShardMapped(fsys, dir, m, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("shard 1 of 1: %v, want ErrInvalid", err)
		}
	})
}

// The golden checkpoints (format version 1, SHA-256; deltas read through
// ReadShard) read through the mapping as they read through ReadShard.
func TestReadShardMappedGolden(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") == "1" {
		t.Skip("rewriting")
	}
	for _, g := range goldenCheckpoints() {
		m, err := Load(vfs.OS, goldenDir, g.m.Step)
		if err != nil {
			t.Fatal(err)
		}
		for k := range m.Shards {
			want, err := ReadShard(vfs.OS, goldenDir, m, k)
			if err != nil {
				t.Fatal(err)
			}
			got, release, err := ReadShardMapped(vfs.OS, goldenDir, m, k)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := got.Keep(); !ok {
				t.Errorf("%s shard %d: a mapped shard cannot be kept", CheckpointName(m.Step), k)
			}
			got.SetKeep(nil) // funcs are never DeepEqual
			got.SetVerify(nil)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s shard %d: ReadShardMapped and ReadShard differ", CheckpointName(m.Step), k)
			}
			release()
		}
	}
}

// A mapped file that shrinks while it is checksummed (or whose pages the
// disk cannot read) gives an error naming where, not a fault that ends
// the process: on the pieces checked on every core and on SHA-256's one
// goroutine.
func TestHashAllOfAShrunkMapping(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapping is tested on linux")
	}
	for _, crc := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "shard")
		if err := os.WriteFile(path, make([]byte, 4*crcChunk), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, unmap, ok := mapFile(f, 4*crcChunk)
		f.Close()
		if !ok {
			t.Fatal("the file was not mapped")
		}
		defer unmap()
		if err := os.Truncate(path, crcChunk/2); err != nil {
			t.Fatal(err)
		}
		var h hash.Hash = newChunkCRC()
		if !crc {
			h = sha256.New()
		}
		err = hashAll(h, b, nil)
		if !errors.Is(err, ErrSize) || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("crc %v: hashing a mapping whose file shrank: %v, want ErrSize naming the byte", crc, err)
		}
	}
}

// ReadShardOverlapped returns what ReadShard returns, and its Verified
// says whether the file was intact: a bit flipped in the header is an
// ErrChecksum at once, one in the data an ErrChecksum from Verified (the
// call itself may succeed, as it returns before the checksum is done).
func TestReadShardOverlapped(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		s, m := mappedShard(t, fsys, dir)
		path := filepath.Join(dir, CheckpointName(9), m.Shards[0].File)
		read, err := ReadShard(fsys, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, release, err := ReadShardOverlapped(fsys, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Verified(); err != nil {
			t.Fatalf("an intact file: Verified says %v", err)
		}
		if err := DiffTensors(got, s); err != nil {
			t.Error(err)
		}
		if !reflect.DeepEqual(got.Tensors, read.Tensors) || !reflect.DeepEqual(got.Meta, read.Meta) || got.Step != read.Step {
			t.Error("ReadShardOverlapped and ReadShard differ")
		}
		release()
		release() // twice is allowed

		file := readAll(t, fsys, path)
		for _, off := range []int{100, crcChunk + 5, 2*crcChunk + 17, len(file) - 1} {
			bad := append([]byte(nil), file...)
			bad[off] ^= 0x10
			overwrite(t, fsys, path, bad)
			sh, release, err := ReadShardOverlapped(fsys, dir, m, 0)
			if err == nil {
				err = sh.Verified()
			}
			if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), m.Shards[0].File) {
				t.Errorf("bit flipped at byte %d: ReadShardOverlapped and Verified say %v, want ErrChecksum naming the file", off, err)
			}
			release()
		}
		overwrite(t, fsys, path, file[:len(file)-8])
		if _, release, err := ReadShardOverlapped(fsys, dir, m, 0); !errors.Is(err, ErrSize) {
			t.Errorf("truncated: ReadShardOverlapped says %v, want ErrSize", err)
		} else {
			release()
		}
	})
}

// What a holder keeps of a mapped shard (Shard.Keep) outlives the file's
// truncation by an outside tool: it was moved into anonymous memory when
// held (truncation takes a file's pages out of every mapping, private
// copies included, and reading them then is a SIGBUS that ends the
// process). A file that shrank before the hold is the shard's Verified
// error instead.
func TestKeptPagesOutliveATruncatedFile(t *testing.T) {
	if os.Getenv("PARAMSERV_WRITE_GOLDEN") == "1" {
		t.Skip("rewriting")
	}
	for _, before := range []bool{false, true} {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(goldenDir)); err != nil {
			t.Fatal(err)
		}
		m, err := Load(vfs.OS, dir, 100)
		if err != nil {
			t.Fatal(err)
		}
		sh, release, err := ReadShardOverlapped(vfs.OS, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		keep, ok := sh.Keep()
		if !ok {
			t.Fatal("a mapped shard cannot be kept")
		}
		var held [][]byte
		var want []byte
		for _, tn := range sh.Tensors {
			held = append(held, tn.Data)
			want = append(want, tn.Data...)
		}
		path := filepath.Join(dir, CheckpointName(m.Step), m.Shards[0].File)
		if before {
			if err := sh.Verified(); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}
		unkeep := keep(held...)
		err = sh.Verified()
		release()
		if before {
			if !errors.Is(err, ErrSize) {
				t.Errorf("truncated before the hold: Verified says %v, want ErrSize", err)
			}
			unkeep()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, b := range held {
			got = append(got, b...) // a SIGBUS here before the fix
		}
		if !bytes.Equal(got, want) {
			t.Error("the kept bytes changed with the file's truncation")
		}
		unkeep()
	}
}
