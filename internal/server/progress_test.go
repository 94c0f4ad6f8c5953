package server

import (
	"fmt"
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
