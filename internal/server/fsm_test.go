package server

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// Two copies of a shard fed the same log end the same: one applies its own
// requests as they came (a primary), the other decodes every entry's bytes
// (a backup); a snapshot of one restores the other.
func TestFSMCopiesApplyTheSameLog(t *testing.T) {
	inc := func() uint64 { return 7 } // every copy of a shard gets the same (replication's incarnations)
	primary, backup := NewFSM(New(Config{NumWorkers: 1, Incarnation: inc}), 0), NewFSM(New(Config{NumWorkers: 1, Incarnation: inc}), 1)
	reqs := []proto.Message{
		&pb.InitRequest{
			Vars:      []*pb.VarSpec{{Name: "w", Shape: []int64{2}, Init: f32(1, 2)}},
			Tables:    []*pb.TableSpec{{Name: "emb", Dim: 2}},
			Optimizer: &pb.OptimizerConfig{Name: "sgd", LearningRate: 0.5}, NumWorkers: 1,
		},
		&pb.PushRequest{Worker: 0, Step: 0, Grads: []*pb.DenseTensor{{Name: "w", Data: f32(2, 4)}}},
		&pb.ChangeRateRequest{Worker: 0, FromStep: 1, LearningRate: 0.125}, // every copy switches at step 1
		&pb.PushRequest{Worker: 0, Step: 1, Grads: []*pb.DenseTensor{{Name: "w", Data: f32(1, 1)}},
			Sparse: []*pb.SparseRows{{Table: "emb", Keys: wire.Uint64Bytes([]uint64{7}), Values: wire.Float32Bytes([]float32{2, 2})}}},
	}
	for i, req := range reqs {
		b, err := EncodeEntry(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := primary.Apply(uint64(i), b, req); err != nil {
			t.Fatalf("primary, entry %d: %v", i, err)
		}
		if _, err := backup.Apply(uint64(i), b, nil); err != nil {
			t.Fatalf("backup, entry %d: %v", i, err)
		}
	}
	touch := EncodeTouch([]PulledRows{{Table: []byte("emb"), Keys: []uint64{9, 7}}})
	for _, f := range []*FSM{primary, backup} {
		if _, err := f.Apply(4, touch, nil); err != nil {
			t.Fatal(err)
		}
	}
	pull := &pb.PullRequest{Names: []string{"w"}, Sparse: []*pb.SparseRows{{Table: "emb", Keys: wire.Uint64Bytes([]uint64{7, 9})}}}
	p1, err := primary.s.Pull(context.Background(), pull)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := backup.s.Pull(context.Background(), pull)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(p1, p2) {
		t.Fatalf("the copies differ after the same log:\nprimary %v\nbackup  %v", p1, p2)
	}
	if got, _ := wire.Float32s(p1.Vars[0].Data); !reflect.DeepEqual(got, []float32{-0.125, -0.125}) {
		t.Errorf("w = %v after pushes of (2, 4) at rate 0.5 and (1, 1) at 0.125, want [-0.125 -0.125]", got)
	}
	snap, err := primary.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	third := NewFSM(New(Config{NumWorkers: 1, Incarnation: inc}), 2)
	if err := third.Restore(snap); err != nil {
		t.Fatal(err)
	}
	again, err := third.Snapshot()
	if err != nil || !bytes.Equal(again, snap) {
		t.Fatalf("a restored copy's snapshot differs from the one it was restored from (%v)", err)
	}
	if st, _ := third.s.Status(context.Background(), &pb.StatusRequest{}); st.GetLearningRate() != 0.125 {
		t.Errorf("a copy restored from a snapshot runs at rate %v, want the changed 0.125", st.GetLearningRate())
	}
}

// An aggregate entry reads back as it was written, and a malformed entry
// is an error that names the shard and what is wrong, not a panic.
func TestFSMEntries(t *testing.T) {
	grads := [][]float32{{1, 2, 3}, {}}
	rows := []shard.RowGrads{{Keys: []uint64{4, 5}, Values: []float32{1, 2, 3, 4}}}
	b := EncodeAggregate(42, grads, rows)
	step, g, r, err := decodeAggregate(b[1:])
	if err != nil || step != 42 || !reflect.DeepEqual(g, grads) || !reflect.DeepEqual(r, rows) {
		t.Fatalf("aggregate read back as %d %v %v (%v), want 42 %v %v", step, g, r, err, grads, rows)
	}
	f := NewFSM(New(Config{Task: 3, NumWorkers: 1}), 0)
	for _, bad := range [][]byte{
		{entryAggregate, 1, 2},
		b[:len(b)-1],
		{entryTouch, 9, 0, 0, 0, 'x'},
		{entryHeard, 1, 0},
		EncodeHeard(1, map[int]time.Duration{0: time.Second})[:9],
		{99},
	} {
		if _, err := f.Apply(7, bad, nil); err == nil || !strings.Contains(err.Error(), "shard 3") {
			t.Errorf("entry % x: %v, want an error naming shard 3", bad, err)
		}
	}
	if _, err := EncodeEntry(&pb.PullRequest{}); err == nil {
		t.Error("a pull was encoded as a log entry")
	}
}

// A primary's heard entry tells a backup when the workers were last heard
// from, as the primary heard them: the backup's times move forward only,
// and the primary, which logged it, keeps its own.
func TestFSMHeardEntry(t *testing.T) {
	primary, backup := NewFSM(New(Config{NumWorkers: 3}), 0), NewFSM(New(Config{NumWorkers: 3}), 1)
	apply := func(b []byte) (before, after time.Time) {
		t.Helper()
		before = time.Now()
		for _, f := range []*FSM{primary, backup} {
			if _, err := f.Apply(1, b, nil); err != nil {
				t.Fatal(err)
			}
		}
		return before, time.Now()
	}
	before, after := apply(EncodeHeard(0, map[int]time.Duration{0: 3 * time.Second, 2: time.Minute, 7: 0})) // 7: no such worker
	if _, seen := primary.s.WorkerActivity(); len(seen) != 0 {
		t.Errorf("the primary took its own entry for news: %v", seen)
	}
	_, seen := backup.s.WorkerActivity()
	if len(seen) != 2 {
		t.Fatalf("the backup heard of %v, want workers 0 and 2", seen)
	}
	for w, ago := range map[int]time.Duration{0: 3 * time.Second, 2: time.Minute} {
		if got := seen[w]; got.Before(before.Add(-ago)) || got.After(after.Add(-ago)) {
			t.Errorf("worker %d heard at %v, want %s before the entry was applied (%v..%v)", w, got, ago, before.Add(-ago), after.Add(-ago))
		}
	}
	apply(EncodeHeard(0, map[int]time.Duration{0: time.Hour})) // an older word changes nothing
	if _, again := backup.s.WorkerActivity(); !again[0].Equal(seen[0]) {
		t.Errorf("an older heard entry moved worker 0 back from %v to %v", seen[0], again[0])
	}
}
