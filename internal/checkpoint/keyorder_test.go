package checkpoint

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// keyOrder sees every key whatever the pieces the bytes come in, keys
// split across them included.
func TestKeyOrderPieces(t *testing.T) {
	const begin, n = 13, 1000 // the keys start at an odd offset
	for _, c := range []struct {
		dup  int // row whose key repeats the one before; -1: none
		want string
	}{{-1, ""}, {1, "at row 1 (10 after 10)"}, {999, "at row 999 (9990 after 9990)"}, {500, "at row 500"}} {
		data := make([]byte, begin+8*n+5)
		for i := range n {
			k := uint64(10 * (i + 1))
			if i == c.dup {
				k = uint64(10 * i)
			}
			binary.LittleEndian.PutUint64(data[begin+8*i:], k)
		}
		for _, most := range []int{17, 300} { // keys split across pieces; many whole keys a piece
			o := &keyOrder{ranges: []keyRange{{table: "t", begin: begin, end: begin + 8*n}}}
			rng := rand.New(rand.NewPCG(1, uint64(c.dup+2)))
			for b := data; len(b) > 0; {
				k := min(len(b), 1+rng.IntN(most))
				o.Write(b[:k])
				b = b[k:]
			}
			switch {
			case c.want == "" && o.err != nil:
				t.Errorf("pieces of up to %d bytes, ascending keys: %v", most, o.err)
			case c.want != "" && (o.err == nil || !strings.Contains(o.err.Error(), c.want)):
				t.Errorf("pieces of up to %d bytes, dup at %d: err %v, want %q", most, c.dup, o.err, c.want)
			}
		}
	}
}

// A shard whose checksum holds but whose table keys are not strictly
// ascending (a restore refuses them) is damaged when verified: Load says
// why, and Latest passes over it to the checkpoint before.
func TestUnorderedKeysAreDamage(t *testing.T) {
	fsys, dir := vfs.NewMem(), "/ckpt"
	saveOne(t, fsys, dir, 10, tableShard(10, 1, map[uint64]float32{1: 1, 2: 2, 3: 3}), 0)
	s := tableShard(20, 1, map[uint64]float32{1: 1, 2: 2, 3: 3})
	for i, tn := range s.Tensors {
		if tn.Name == "t/keys" {
			s.Tensors[i] = Uint64Tensor("t/keys", []int64{3}, []uint64{1, 3, 2})
		}
	}
	info, err := WriteShard(fsys, dir, 20, 0, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Step: 20, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []ShardInfo{info},
		Variables: []VariableInfo{{Name: "w", Shape: []int64{2}, Parts: []Part{{Shard: 0}}}},
		Tables:    []TableInfo{{Name: "t", Dim: 2, Slots: []string{"acc", "updates"}, Shards: []int{0}}}}
	if err := WriteManifest(fsys, dir, m); err != nil {
		t.Fatal(err)
	}
	_, err = Load(fsys, dir, 20)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `shard-0-of-1.safetensors: table "t": keys not strictly ascending at row 2 (2 after 3)`) {
		t.Fatalf("Load: %v", err)
	}
	if step, skipped := latestStep(t, fsys, dir); step != 10 || len(skipped) != 1 {
		t.Errorf("Latest: step %d, skipped %v; want 10, passing over 20", step, skipped)
	}
}
