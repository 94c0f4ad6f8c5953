package shard

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/vfs"
)

// A shard written from StreamShard, its tables filled from the cut's pages
// in the order they lie as the file is written, holds Shard's rows, in the
// table's order (AnyOrder): in key order it is Shard's, byte for byte, with
// the same tensors and size. Tables of dim 1 and 3, with update counts
// (Adam) and last-touched steps (eviction), in key order and not, with
// rows freed and not, large enough that the file's 4 MiB pieces cut across
// tensors and rows, beside a dense variable.
func TestStreamShardMatchesShard(t *testing.T) {
	const rows = 40_000
	adam := &optim.Config{Name: "adam", LearningRate: 0.01}
	layout := Layout{
		Vars: []VarSpec{{Name: "w", Shape: []int64{1000, 3}}},
		Tables: []TableSpec{
			{Name: "ftrl1", Dim: 1},
			{Name: "ftrl3", Dim: 3},
			{Name: "adam3", Dim: 3, EvictAfterSteps: 100, Optimizer: adam},
			{Name: "holes", Dim: 2, EvictAfterSteps: 100, Optimizer: adam},
			{Name: "pushed", Dim: 2, EvictAfterSteps: 100, Optimizer: adam},
		},
		Optimizer:  optim.Config{Name: "ftrl", LearningRate: 0.05},
		NumWorkers: 1,
	}
	rng := rand.New(rand.NewPCG(5, 6))
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	if _, err := s.Init(layout, [][]float32{randFloats(rng, 3000)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ftrl1", "ftrl3", "adam3", "holes"} {
		tb := s.st.tables[name].t
		d := tb.Dim()
		snap := sparse.Snapshot{Dim: d, Keys: make([]uint64, rows), Values: randFloats(rng, rows*d),
			State: [][]float32{randFloats(rng, rows*d), randFloats(rng, rows*d)}}
		for i := range snap.Keys {
			snap.Keys[i] = uint64(i)*1000 + rng.Uint64N(1000)
		}
		if name == "adam3" || name == "holes" {
			snap.Updates = make([]uint32, rows)
			snap.LastTouch = make([]int64, rows)
			for i := range rows {
				snap.Updates[i] = rng.Uint32N(50)
				snap.LastTouch[i] = rng.Int64N(40)
			}
		}
		if err := tb.Import(snap); err != nil {
			t.Fatal(err)
		}
	}
	// Rows in key order, some freed: not dense.
	if n := s.st.tables["holes"].t.Evict(110); n == 0 || n == rows {
		t.Fatalf("evicted %d rows of %d", n, rows)
	}
	// Rows in the order keys arrived: not in key order.
	pushed := s.st.tables["pushed"].t
	var first []uint64
	for step := range int64(3) {
		keys := make([]uint64, 5_000)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		if step == 0 {
			first = keys
		}
		if err := pushed.Push(keys, randFloats(rng, 2*len(keys)), 10+step); err != nil {
			t.Fatal(err)
		}
	}

	want := s.Cut()
	wantSh := want.Shard()
	got := s.Cut()
	gotSh := got.StreamShard()
	if !gotSh.AnyOrder || wantSh.AnyOrder {
		t.Fatalf("AnyOrder: streamed %v, Shard's %v; want true, false", gotSh.AnyOrder, wantSh.AnyOrder)
	}
	streamed := 0
	for _, tn := range gotSh.Tensors {
		if tn.Fill != nil {
			streamed++
		}
	}
	if streamed != 5*4+3*2 { // keys, values, 2 slots of each table; the Adam tables' counts and steps
		t.Fatalf("%d tensors stream, want 26", streamed)
	}
	dir := t.TempDir()
	wantInfo, err := checkpoint.WriteShard(vfs.OS, filepath.Join(dir, "shard"), 7, 0, 1, wantSh)
	if err != nil {
		t.Fatal(err)
	}
	gotInfo, err := checkpoint.WriteShard(vfs.OS, filepath.Join(dir, "stream"), 7, 0, 1, gotSh)
	got.Release()
	if err != nil {
		t.Fatal(err)
	}
	if wantInfo.Size < 4<<20 {
		t.Fatalf("the file is %d bytes: too small to have pieces that cut across tensors", wantInfo.Size)
	}
	if !gotInfo.AnyOrder || !reflect.DeepEqual(gotInfo.Tensors, wantInfo.Tensors) {
		t.Fatalf("streamed shard's info\n%+v\nwant the tensors of\n%+v, AnyOrder", gotInfo, wantInfo)
	}
	b, err := os.ReadFile(filepath.Join(dir, "stream", checkpoint.CheckpointName(7), gotInfo.File))
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := checkpoint.DecodeSafetensors(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	file := checkpoint.Shard{Tensors: tensors, AnyOrder: true}
	// The pushed table's rows in the order they came.
	keys, err := file.Uint64s("pushed/keys")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys[:len(first)], first) {
		t.Fatal("the pushed table's first keys in the file are not those of the first push, in its order")
	}
	var tables []checkpoint.TableInfo
	for _, tb := range layout.Tables {
		tables = append(tables, checkpoint.TableInfo{Name: tb.Name})
	}
	inOrder, err := checkpoint.InKeyOrder(file, tables)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.DiffTensors(inOrder, wantSh); err != nil {
		t.Fatalf("the streamed file's rows in key order are not Shard's: %v", err)
	}
	// EncodeSafetensors writes Fill tensors as it writes Data tensors.
	var x, y bytes.Buffer
	if _, err := checkpoint.EncodeSafetensors(&x, tensors, nil); err != nil {
		t.Fatal(err)
	}
	again := s.Cut()
	if _, err := checkpoint.EncodeSafetensors(&y, again.StreamShard().Tensors, nil); err != nil {
		t.Fatal(err)
	}
	again.Release()
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("EncodeSafetensors of Fill tensors differs from that of Data tensors")
	}
	if !slices.EqualFunc(wantSh.Tensors, gotSh.Tensors, func(x, y checkpoint.Tensor) bool { return x.Name == y.Name }) {
		t.Fatal("the streamed shard's tensors are not Shard's")
	}
}
