package tier

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
)

// A shard whose table has a disk tier cuts the same checkpoint as one
// with every row in memory, at every budget, while the background rounds
// move rows; and a cut taken before more pushes and demotions still reads
// the state at the cut.
func TestShardCutCoversBothTiers(t *testing.T) { forEachEngine(t, testShardCutCoversBothTiers) }

func testShardCutCoversBothTiers(t *testing.T) {
	for _, budget := range []int64{0, 2000, 1 << 30} {
		for _, evict := range []int64{0, 6} {
			t.Run(fmt.Sprintf("budget%d/evict%d", budget, evict), func(t *testing.T) {
				layout := shard.Layout{
					Tables:     []shard.TableSpec{{Name: "emb", Dim: 4, MinCount: 2, EvictAfterSteps: evict}},
					Optimizer:  optim.Config{Name: "adagrad", LearningRate: 0.1},
					NumWorkers: 1,
				}
				m, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budget})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				var mu sync.Mutex
				ref := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
				tiered := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: m})
				for _, s := range []*shard.Shard{ref, tiered} {
					if _, err := s.Init(layout, nil); err != nil {
						t.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(uint64(budget), uint64(evict)))
				push := func() {
					keys := make([]uint64, 0, 16)
					seen := map[uint64]bool{}
					for range 16 {
						k := uint64(rng.ExpFloat64() * 60)
						if !seen[k] {
							seen[k] = true
							keys = append(keys, k)
						}
					}
					g := make([]float32, 4*len(keys))
					for i := range g {
						g[i] = float32(rng.NormFloat64())
					}
					for _, s := range []*shard.Shard{ref, tiered} {
						mu.Lock()
						pullPush(t, s, keys, g)
						mu.Unlock()
					}
					if err := m.Round(&mu, time.Unix(0, 0)); err != nil {
						t.Fatal(err)
					}
				}
				for range 60 {
					push()
				}
				mu.Lock()
				wantCut, gotCut := ref.Cut(), tiered.Cut()
				mu.Unlock()
				for range 40 {
					push()
				}
				sameTables(t, wantCut.Shard(), gotCut.Shard())
				if err := gotCut.Err(); err != nil {
					t.Fatal(err)
				}
				sameTables(t, ref.Snapshot(), tiered.Snapshot())
				if budget == 0 && m.Stats().DiskRows == 0 {
					t.Fatal("budget 0, but no row went to disk")
				}
				// Status counts the rows of both tiers (rows on disk past
				// an eviction are counted until found, so only without).
				mu.Lock()
				want, got := ref.Status().Tables[0], tiered.Status().Tables[0]
				totals := m.Stats()
				mu.Unlock()
				if evict == 0 && got.Rows != want.Rows {
					t.Errorf("status: %d rows with a disk tier, %d all in memory", got.Rows, want.Rows)
				}
				if got.TierRows != totals.DiskRows || got.TierLookups != totals.Lookups || got.TierHits != totals.Hits {
					t.Errorf("status: %d rows on disk, %d lookups, %d hits; the tier counts %d, %d, %d",
						got.TierRows, got.TierLookups, got.TierHits, totals.DiskRows, totals.Lookups, totals.Hits)
				}
			})
		}
	}
}

// sameTables compares every tensor of want with got's of the same name.
func sameTables(t *testing.T, want, got checkpoint.Shard) {
	t.Helper()
	have := map[string][]byte{}
	for _, x := range got.Tensors {
		have[x.Name] = x.Data
	}
	for _, x := range want.Tensors {
		if !bytes.Equal(have[x.Name], x.Data) {
			t.Fatalf("tensor %s: %d bytes all in memory, %d with a disk tier, not the same", x.Name, len(x.Data), len(have[x.Name]))
		}
	}
}

// pullPush pulls the rows of keys from s, then pushes g to them, checked
// and applied, as a worker's step does on the table "emb".
func pullPush(t *testing.T, s *shard.Shard, keys []uint64, g []float32) {
	t.Helper()
	out := make([]float32, len(g))
	if err := s.PullRows([]byte("emb"), keys, nil, false, out); err != nil {
		t.Fatal(err)
	}
	p := &shard.Push{Worker: 0, Step: s.Step(), Sparse: []shard.SparseGrad{{Table: []byte("emb"), Keys: keys, Values: g, Bad: shard.Unchecked}}}
	if err := s.Check(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
		t.Fatal(err)
	}
}
