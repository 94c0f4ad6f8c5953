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

// A shard written from StreamShard, its in-order tables filled from the
// cut's pages as the file is written, is the file written from Shard, byte
// for byte, with the same ShardInfo: tables of dim 1 and 3, with update
// counts (Adam) and last-touched steps (eviction), in key order and not,
// large enough that the file's 4 MiB pieces cut across tensors and rows,
// beside a dense variable.
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
	for step := range int64(3) {
		keys := make([]uint64, 5_000)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		if err := pushed.Push(keys, randFloats(rng, 2*len(keys)), 10+step); err != nil {
			t.Fatal(err)
		}
	}

	want := s.Cut()
	wantSh := want.Shard()
	got := s.Cut()
	gotSh := got.StreamShard()
	streamed := 0
	for _, tn := range gotSh.Tensors {
		if tn.Fill != nil {
			streamed++
		}
	}
	if streamed != 4*4+2*2 { // keys, values, 2 slots of each in-order table; adam3's and holes' counts and steps
		t.Fatalf("%d tensors stream, want 20", streamed)
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
	if !reflect.DeepEqual(gotInfo, wantInfo) {
		t.Fatalf("streamed shard's info\n%+v\nwant\n%+v", gotInfo, wantInfo)
	}
	read := func(sub string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, sub, checkpoint.CheckpointName(7), wantInfo.File))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read("stream"), read("shard")) {
		t.Fatal("the streamed file differs from the one written from Shard")
	}
	// EncodeSafetensors writes Fill tensors as it writes Data tensors.
	var a, b bytes.Buffer
	if _, err := checkpoint.EncodeSafetensors(&a, wantSh.Tensors, nil); err != nil {
		t.Fatal(err)
	}
	again := s.Cut()
	if _, err := checkpoint.EncodeSafetensors(&b, again.StreamShard().Tensors, nil); err != nil {
		t.Fatal(err)
	}
	again.Release()
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("EncodeSafetensors of Fill tensors differs from that of Data tensors")
	}
	if !slices.EqualFunc(wantSh.Tensors, gotSh.Tensors, func(x, y checkpoint.Tensor) bool { return x.Name == y.Name }) {
		t.Fatal("the streamed shard's tensors are not Shard's")
	}
}
