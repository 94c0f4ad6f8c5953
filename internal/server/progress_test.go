package server

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/vfs"
)

// restoreObserver records the restore's progress updates.
type restoreObserver struct {
	nopObserver
	updates []progress.Update
}

func (o *restoreObserver) RestoreProgress(u progress.Update) { o.updates = append(o.updates, u) }

// A restore at start logs how far it has come while it reads the shard
// files (here every read, the clock moving 10s at every look), first the
// newest checkpoint's verification, then the restore of this ps's shard
// with its share of the file's size, and tells the observer every read up
// to all the file's bytes.
func TestRestoreReportsProgress(t *testing.T) {
	fs := vfs.NewMem()
	a := newCluster(t, fs, 2)
	a.init(t)
	a.train(t, 5, 1)
	step := a.save(t)
	m, err := checkpoint.Load(fs, dir, step)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	var lines []string
	obs := &restoreObserver{}
	s := New(Config{Task: 1, NumPS: 2, NumWorkers: 1, CheckpointDir: dir, FS: fs, Observer: obs,
		Clock: func() time.Time { now = now.Add(10 * time.Second); return now },
		Logf:  func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }})
	if ok, err := s.RestoreLatest(); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	size := m.Shards[0].Size + m.Shards[1].Size // w is split across both, read for its update count
	want := []*regexp.Regexp{
		regexp.MustCompile(`^checkpoint: verifying the newest checkpoint: [0-9.]+ kB, [0-9.]+ kB/s$`),
		regexp.MustCompile(`^checkpoint: verifying the newest checkpoint: done: `),
		regexp.MustCompile(fmt.Sprintf(`^checkpoint: restoring step %d: [0-9.]+ kB of [0-9.]+ kB \(100%%\), [0-9.]+ kB/s$`, step)),
		regexp.MustCompile(fmt.Sprintf(`^checkpoint: restoring step %d: done: [0-9.]+ kB in`, step)),
	}
	i := 0
	for _, l := range lines {
		if i < len(want) && want[i].MatchString(l) {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("log lines:\n%q\nwant, in order, lines like %s (found the first %d)", lines, want, i)
	}
	last := obs.updates[len(obs.updates)-1]
	if !last.Done || last.Bytes != size || last.Total != size || last.Fraction() != 1 {
		t.Fatalf("the last update %+v, want done with all %d bytes of the two shards", last, size)
	}
}

// A restore from the real disk maps the shard files
// (checkpoint.ReadShardMapped through meteredFS) and still counts every
// byte it reads into the progress meter.
func TestMappedRestoreCountsProgress(t *testing.T) {
	d := t.TempDir()
	s := checkpoint.Shard{Step: 3, Tensors: []checkpoint.Tensor{
		checkpoint.Float32Tensor("w", []int64{3 << 20}, make([]float32, 3<<20))}} // 12 MiB: three checksum pieces
	info, err := checkpoint.WriteShard(vfs.OS, d, 3, 0, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint.Manifest{Step: 3, NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info},
		Variables: []checkpoint.VariableInfo{{Name: "w", Shape: []int64{3 << 20}, Parts: []checkpoint.Part{{Shard: 0}}}}}
	if err := checkpoint.WriteManifest(vfs.OS, d, m); err != nil {
		t.Fatal(err)
	}
	if m, err = checkpoint.Load(vfs.OS, d, 3); err != nil {
		t.Fatal(err)
	}
	var last progress.Update
	meter := &progress.Meter{What: "restore", Total: info.Size, Now: time.Now, Logf: func(string, ...any) {},
		Observe: func(u progress.Update) { last = u }}
	meter.Start()
	fsys := meteredFS{vfs.OS, &syncMeter{m: meter}}
	f, err := fsys.Open(filepath.Join(d, checkpoint.CheckpointName(3), info.File))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, ok := f.(vfs.MappedReader); !ok {
		t.Fatalf("meteredFS opened a %T, not a vfs.MappedReader", f)
	}
	got, release, err := checkpoint.ReadShardMapped(fsys, d, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.DiffTensors(got, s); err != nil {
		t.Error(err)
	}
	release()
	meter.Add(0)
	if last.Bytes != info.Size {
		t.Fatalf("the meter counted %d bytes of the %d-byte file", last.Bytes, info.Size)
	}
}
