package shard

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/consistency"
	"github.com/paramserv/paramserv/internal/optim"
)

// Sparse tables under replication, the protocol's core without a network:
// copies read rows without changing their tables (PeekPulls); a pull that
// would change them is "logged" (TouchRows on every copy) before the
// primary reads; pushes are applied by every copy (async) or by the
// primary, whose step aggregate, rows included, the backup applies (sync).
// With admission (MinCount 2), eviction and Adam (per-row counts), every
// pull answers what an unreplicated shard answers, and at every step the
// copies encode to the same bytes as the unreplicated shard: rows,
// optimizer state, admission counts, statistics. Midway the backup is
// replaced by a copy made with EncodeCopy (re-replication), and later the
// primary dies and the backup goes on as primary with a new copy.
func TestReplicatedTablesMatchUnreplicated(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := "async"
		if sync {
			name = "sync"
		}
		t.Run(name, func(t *testing.T) { replicatedTablesJob(t, sync, true) })
	}
}

// replicatedTablesJob runs the job of TestReplicatedTablesMatchUnreplicated;
// log false skips logging the pulls (to see the test fail without it).
func replicatedTablesJob(t *testing.T, sync, log bool) {
	defer func(w int) { sketchWidth = w }(sketchWidth)
	sketchWidth = 1 << 12 // the copies encode it whole: keep -race quick
	l := Layout{
		Vars: []VarSpec{{Name: "b", Shape: []int64{2}}},
		Tables: []TableSpec{
			{Name: "emb", Dim: 3, MinCount: 2, EvictAfterSteps: 6, Initializer: "normal", InitStddev: 0.1, Seed: 7},
			{Name: "w", Dim: 1},
		},
		Optimizer:  optim.Config{Name: "adam", LearningRate: 0.05},
		NumWorkers: 2, Sync: sync,
	}
	if sync {
		l.ReplicasToAggregate = 2
	}
	one := func() uint64 { return 1 }
	var backup *Shard
	var shipErr error
	newCopy := func() *Shard {
		var s *Shard
		s = New(Config{NumWorkers: 2, PeekPulls: true, Incarnation: one, Aggregated: func(step int64, grads [][]float32, rows []RowGrads) {
			if s == backup { // a backup completes no step
				t.Errorf("the backup completed step %d itself", step)
				return
			}
			// The log entry: copies of what is valid during the call.
			g := make([][]float32, len(grads))
			for i := range grads {
				g[i] = append([]float32(nil), grads[i]...)
			}
			r := make([]RowGrads, len(rows))
			for i := range rows {
				r[i] = RowGrads{Keys: append([]uint64(nil), rows[i].Keys...), Values: append([]float32(nil), rows[i].Values...)}
			}
			defer func() { // after the primary's own update, as the log would
				if shipErr == nil {
					shipErr = backup.ApplyAggregate(step, g, r)
				}
			}()
		}})
		return s
	}
	ref := New(Config{NumWorkers: 2, Incarnation: one})
	primary, backup := newCopy(), newCopy()
	init := [][]float32{{0.5, -0.5}}
	for _, s := range []*Shard{ref, primary, backup} {
		if _, err := s.Init(l, init); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	same := func(when string) {
		t.Helper()
		want, err := ref.EncodeCopy()
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*Shard{"primary": primary, "backup": backup} {
			got, err := s.EncodeCopy()
			if err != nil {
				t.Fatal(err)
			}
			if sync {
				// A backup applies aggregates, not pushes: its tracker
				// counts no pushes applied (as for dense variables).
				got, want = noTrackerStats(t, got), noTrackerStats(t, want)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: the %s's state (%d bytes) differs from the unreplicated shard's (%d bytes)", when, name, len(got), len(want))
			}
		}
	}
	now := time.Now()
	for step := int64(0); step < 24; step++ {
		switch step {
		case 8: // re-replication: the backup is replaced by a copy of the primary
			b, err := primary.EncodeCopy()
			if err != nil {
				t.Fatal(err)
			}
			backup = newCopy()
			if err := backup.DecodeCopy(b, time.Time{}); err != nil {
				t.Fatal(err)
			}
		case 16: // failover: the primary dies, the backup serves, a new copy backs it
			primary = backup
			b, err := primary.EncodeCopy()
			if err != nil {
				t.Fatal(err)
			}
			backup = newCopy()
			if err := backup.DecodeCopy(b, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		var pushes [2][2]SparseGrad
		for w := range 2 {
			for ti, tb := range []string{"emb", "w"} {
				dim := []int{3, 1}[ti]
				keys := make([]uint64, 4+rng.IntN(4))
				for i := range keys {
					keys[i] = uint64(rng.IntN(30)) // repeats within a pull too
				}
				want := make([]float32, len(keys)*dim)
				if err := ref.PullRows([]byte(tb), keys, nil, false, want); err != nil {
					t.Fatal(err)
				}
				if ch, err := primary.PullChanges([]byte(tb), keys); err != nil {
					t.Fatal(err)
				} else if ch && log {
					for _, s := range []*Shard{primary, backup} {
						if err := s.TouchRows([]byte(tb), keys); err != nil {
							t.Fatal(err)
						}
					}
				}
				got := make([]float32, len(keys)*dim)
				if err := primary.PullRows([]byte(tb), keys, nil, false, got); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("step %d worker %d table %s: the primary reads %v, the unreplicated shard %v", step, w, tb, got, want)
					}
				}
				// Distinct keys, as workers push them.
				seen := map[uint64]bool{}
				var pk []uint64
				var g []float32
				for i, k := range keys {
					if seen[k] {
						continue
					}
					seen[k] = true
					pk = append(pk, k)
					for j := range dim {
						g = append(g, got[i*dim+j]*0.3+float32(w+1)*0.01*float32(k%5)-0.02)
					}
				}
				pushes[w][ti] = SparseGrad{Table: []byte(tb), Keys: pk, Values: g, Bad: Unchecked}
			}
		}
		for w := range 2 {
			targets := []*Shard{ref, primary, backup}
			if sync {
				targets = targets[:2] // the backup gets the step's aggregate
			}
			for _, s := range targets {
				p := Push{Worker: w, Step: step, Dense: []DenseGrad{{Name: []byte("b"), Values: []float32{float32(w) - 0.5, 0.25}, Bad: Unchecked}}}
				for _, sg := range pushes[w] {
					sg.Values = append([]float32(nil), sg.Values...) // each copy its own
					p.Sparse = append(p.Sparse, sg)
				}
				if err := s.Check(&p); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Apply(&p, now, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if shipErr != nil {
			t.Fatalf("step %d: the backup refused the aggregate: %v", step, shipErr)
		}
		same(fmt.Sprintf("after step %d", step))
	}
	st := ref.st.tableOrd[0].t.Stats()
	if st.Evicted == 0 || st.RejectedPulls == 0 || st.Admitted == 0 {
		t.Fatalf("the job tried too little: %+v (want admissions, rows evicted, pulls refused by admission)", st)
	}
}

// noTrackerStats is a copy's bytes with the tracker's statistics zeroed.
func noTrackerStats(t *testing.T, b []byte) []byte {
	t.Helper()
	hl := int(binary.LittleEndian.Uint32(b))
	var h copyHeader
	if err := json.Unmarshal(b[4:4+hl], &h); err != nil {
		t.Fatal(err)
	}
	h.Tracker.Stats = consistency.Stats{}
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(hb)))
	return append(append(out, hb...), b[4+hl:]...)
}
