package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// chunkCRCOf computes ChecksumCRC32C4M as its doc says, in one piece.
func chunkCRCOf(b []byte) string {
	var sums []byte
	for len(b) > 0 {
		k := min(len(b), crcChunk)
		sums = binary.BigEndian.AppendUint32(sums, crc32.Checksum(b[:k], crc32.MakeTable(crc32.Castagnoli)))
		b = b[k:]
	}
	s := sha256.Sum256(sums)
	return hex.EncodeToString(s[:])
}

// The chunked CRC is what its doc says, whatever pieces the bytes come in.
func TestChunkCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, crcChunk - 1, crcChunk, crcChunk + 1, 3*crcChunk + 12345} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := chunkCRCOf(b)
		h := newChunkCRC()
		for rest := b; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(crcChunk/3))
			h.Write(rest[:k])
			rest = rest[k:]
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%d bytes in pieces: %s, want %s", size, got, want)
		}
		// Sum does not change the state.
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%d bytes, second Sum: %s, want %s", size, got, want)
		}
	}
}

// New checkpoints record a chunked CRC-32C and say format version 3, which
// a program that reads at most version 2 refuses; a bit flipped in any
// piece of a file larger than one piece is found.
func TestChunkCRCCheckpoint(t *testing.T) {
	fsys := vfs.NewMem()
	vals := make([]float32, 3*crcChunk/4/2) // 1.5 pieces of values, 1.5 of the slot
	for i := range vals {
		vals[i] = float32(i)
	}
	s := Shard{Step: 7, Tensors: []Tensor{
		Float32Tensor("w", []int64{int64(len(vals))}, vals),
		Float32Tensor("w/m", []int64{int64(len(vals))}, vals),
	}}
	info, err := WriteShard(fsys, testDir, 7, 0, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != "" || !strings.HasPrefix(info.Checksum, ChecksumCRC32C4M+":") {
		t.Fatalf("ShardInfo sha256 %q checksum %q, want only a %s checksum", info.SHA256, info.Checksum, ChecksumCRC32C4M)
	}
	path := testDir + "/" + CheckpointName(7) + "/" + info.File
	file := readAll(t, fsys, path)
	if want := ChecksumCRC32C4M + ":" + chunkCRCOf(file); info.Checksum != want {
		t.Fatalf("checksum %s, want %s", info.Checksum, want)
	}
	m := Manifest{Step: 7, NumPS: 1, NumWorkers: 1, Shards: []ShardInfo{info},
		Variables: []VariableInfo{{Name: "w", Shape: []int64{int64(len(vals))}, Slots: []string{"m"}, Parts: []Part{{Shard: 0}}}}}
	if err := WriteManifest(fsys, testDir, m); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal(readAll(t, fsys, manifestPath(testDir, 7)), &raw); err != nil || raw.FormatVersion != ChecksumFormatVersion {
		t.Fatalf("format_version %d, %v; want %d", raw.FormatVersion, err, ChecksumFormatVersion)
	}
	m, err = Load(fsys, testDir, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadShard(fsys, testDir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := DiffTensors(got, s); err != nil {
		t.Fatal(err)
	}
	// A manifest of an older version may not carry the new checksum.
	old := m
	old.FormatVersion = DeltaFormatVersion
	if err := old.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "a crc32c-4m checksum in a checkpoint of format_version 2 (want 3)") {
		t.Errorf("Validate of a version-2 manifest with a CRC: %v", err)
	}
	for _, off := range []int{100, crcChunk + 5, 2*crcChunk + 17, len(file) - 1} {
		bad := append([]byte(nil), file...)
		bad[off] ^= 0x10
		overwrite(t, fsys, path, bad)
		_, err := Load(fsys, testDir, 7)
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "file has CRC-32C") {
			t.Errorf("bit flipped at byte %d: Load says %v, want a CRC-32C checksum mismatch", off, err)
		}
		if _, err := ReadShard(fsys, testDir, m, 0); !errors.Is(err, ErrChecksum) {
			t.Errorf("bit flipped at byte %d: ReadShard says %v, want ErrChecksum", off, err)
		}
	}
}
