package checkpoint

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// A checkpoint whose parameters hold a NaN is damaged for paramserv's own
// readers (Verifier{Finite: true}): set aside, never restored, and ls does
// not say ok. The format itself allows NaN: the zero Verifier, Load and
// ReadShard read it bit for bit (testShards holds one in hid_w).
func TestNonFiniteSetAside(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		fixedNow(t, asideTime)
		mustSave(t, fsys, dir, 400)
		if m, _, err := Latest(fsys, dir); err != nil || m.Step != 400 {
			t.Fatalf("zero Verifier: Latest = %d, %v", m.Step, err)
		}
		v := Verifier{Finite: true}
		l, err := v.List(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) != 1 || l.Entries[0].Status() == "ok" || !errors.Is(l.Entries[0].Err, ErrFormat) ||
			!strings.Contains(l.Entries[0].Err.Error(), `tensor "hid_w" element 3 is NaN`) {
			t.Fatalf("List: %+v", l.Entries)
		}
		_, skipped, err := v.LatestSetAside(fsys, dir)
		if !errors.Is(err, ErrNotFound) || len(skipped) != 1 || skipped[0].SetAside == "" {
			t.Fatalf("LatestSetAside: %v, %+v; want the NaN checkpoint set aside and none found", err, skipped)
		}
	})
}

// The streaming check finds a value however the bytes are cut.
func TestFiniteCheckPieces(t *testing.T) {
	vals := []float32{1, 2, 3, float32(math.Inf(-1)), 5}
	data := Float32Tensor("w", []int64{5}, vals).Data
	for size := 1; size <= len(data); size++ {
		c := finiteCheck{ranges: []finiteRange{{name: "w", begin: 0, end: int64(len(data))}}}
		for off := 0; off < len(data); off += size {
			c.Write(data[off:min(off+size, len(data))])
		}
		if c.err == nil || !strings.Contains(c.err.Error(), "element 3 is -Inf") {
			t.Fatalf("pieces of %d: %v", size, c.err)
		}
	}
	if err := CheckFinite(Shard{Tensors: []Tensor{Float32Tensor("w", []int64{5}, vals)}}); err == nil {
		t.Fatal("CheckFinite passed -Inf")
	}
}

// A delta checkpoint is held to its parents' values too: with a NaN in
// its base (in a row the deltas keep, and in "w", which a delta replaces),
// every checkpoint of the chain is damaged for paramserv's readers, by
// List, Latest and Load alike, naming the link and the value. Before, only
// the newest file was checked for finite values, and the chain's parents
// only for their checksums.
func TestDeltaParentsFinite(t *testing.T) {
	fsys, dir := vfs.NewMem(), "/ckpt"
	nan := float32(math.NaN())
	saveOne(t, fsys, dir, 10, tableShard(10, nan, map[uint64]float32{1: 1, 4: nan}), 0)
	w := float32(7)
	saveOne(t, fsys, dir, 20, deltaOf(20, 10, &w, map[uint64]float32{1: 20}), 10)
	v := Verifier{Finite: true}
	l, err := v.List(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Entries {
		if e.Status() == "ok" || !errors.Is(e.Err, ErrFormat) && !errors.Is(e.Err, ErrChain) {
			t.Errorf("List: %s: %v, want damaged by a value not finite", e.Name, e.Err)
		}
	}
	if m, _, err := v.Latest(fsys, dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("Latest = %d, %v; want none found", m.Step, err)
	}
	_, err = v.Load(fsys, dir, 20)
	if !errors.Is(err, ErrChain) || !strings.Contains(err.Error(), "ckpt-20 is a delta of ckpt-10, which is damaged") || !strings.Contains(err.Error(), "is NaN") {
		t.Errorf("Load(20) = %v; want the chain's NaN named", err)
	}
	// The format alone allows NaN, parents included.
	if _, err := Load(fsys, dir, 20); err != nil {
		t.Errorf("zero Verifier: Load(20) = %v", err)
	}
}
