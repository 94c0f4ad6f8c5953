package checkpoint

import (
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// streamedShard is a shard of three large tensors made by Fill and a small
// one of Data, and the same shard with every tensor's Data: the file is
// several 4 MiB pieces, the pieces cut across tensors and elements.
func streamedShard(step int64) (fill, data Shard) {
	const n = 700_001 // keys: 5.6 MB; floats of dim 3: 8.4 MB
	key := func(i int) uint64 { return uint64(i)*2654435761 + 7 }
	val := func(i int) float32 { return float32(math.Sin(float64(i))) }
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = key(i)
	}
	vals := make([]float32, 3*n)
	for i := range vals {
		vals[i] = val(i)
	}
	steps := make([]int64, n)
	for i := range steps {
		steps[i] = int64(i % 1000)
	}
	small := Float32Tensor("w", []int64{5}, []float32{1, 2, 3, 4, 5})
	fill = Shard{Step: step, Meta: map[string]string{"a": "b"}, Tensors: []Tensor{
		Uint64TensorFill("t/keys", []int64{n}, func(dst []uint64, i int) { copy(dst, keys[i:]) }),
		Float32TensorFill("t/values", []int64{n, 3}, func(dst []float32, i int) { copy(dst, vals[i:]) }),
		Int64TensorFill("t/last_touch", []int64{n}, func(dst []int64, i int) { copy(dst, steps[i:]) }),
		small,
	}}
	data = Shard{Step: step, Meta: map[string]string{"a": "b"}, Tensors: []Tensor{
		Uint64Tensor("t/keys", []int64{n}, keys),
		Float32Tensor("t/values", []int64{n, 3}, vals),
		Int64Tensor("t/last_touch", []int64{n}, steps),
		small,
	}}
	return fill, data
}

// WriteShard of tensors made by Fill writes the file it writes of the same
// tensors' Data, with the same checksum, and the file reads back.
func TestWriteShardFillMatchesData(t *testing.T) {
	fill, data := streamedShard(3)
	dir := t.TempDir()
	want, err := WriteShard(vfs.OS, filepath.Join(dir, "data"), 3, 0, 1, data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := WriteShard(vfs.OS, filepath.Join(dir, "fill"), 3, 0, 1, fill)
	if err != nil {
		t.Fatal(err)
	}
	if want.Size < 3*crcChunk {
		t.Fatalf("the file is %d bytes, fewer than 3 pieces", want.Size)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("written from Fill: %+v\nfrom Data: %+v", got, want)
	}
	m := Manifest{Step: 3, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []ShardInfo{got}}
	back, err := ReadShard(vfs.OS, filepath.Join(dir, "fill"), m, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range data.Tensors {
		b, err := back.Lookup(tn.Name)
		if err != nil || !reflect.DeepEqual(b.Data, tn.Data) {
			t.Fatalf("tensor %q does not read back (%v)", tn.Name, err)
		}
	}
}

// A streamed write that fails (the disk fills up) returns the disk's error,
// leaves no file, and stops the goroutines that make the pieces.
func TestDiskFullMidStreamedShard(t *testing.T) {
	fsys := vfs.NewMem()
	fill, _ := streamedShard(500)
	full := vfs.FailFrom(vfs.OpWrite, 2, syscall.ENOSPC)
	fsys.SetInjector(full)
	before := runtime.NumGoroutine()
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err = WriteShard(fsys, testDir, 500, 0, 1, fill)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("WriteShard did not return after a write failed: the pieces' goroutines wait for each other")
	}
	fsys.SetInjector(nil)
	if !full.Fired() || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteShard on a full disk: %v (fault fired: %v)", err, full.Fired())
	}
	for _, name := range []string{shardPath(testDir, 500, 0), shardPath(testDir, 500, 0) + ".tmp"} {
		if _, err := fsys.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after the failed save", name)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the failed write, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}
