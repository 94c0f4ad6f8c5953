package tier

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
)

// A replica's copy of a shard whose table is mostly on disk (what a ps
// that rejoins under --replicas is sent) holds the rows of both tiers; a
// copy with a disk tier takes the rows past its budget straight into its
// store, and trains on as a copy all in memory does.
func TestCopyCoversBothTiers(t *testing.T) { forEachEngine(t, testCopyCoversBothTiers) }

func testCopyCoversBothTiers(t *testing.T) {
	for _, evict := range []int64{0, 30} {
		t.Run(fmt.Sprintf("evict%d", evict), func(t *testing.T) {
			layout := shard.Layout{
				Tables:     []shard.TableSpec{{Name: "emb", Dim: 4, MinCount: 2, EvictAfterSteps: evict}},
				Optimizer:  optim.Config{Name: "adagrad", LearningRate: 0.1},
				NumWorkers: 1,
			}
			w := newTwinShards(t, layout, 0, 21)
			for range 80 {
				w.push()
			}
			// Every row on disk, then rows of new keys only: the table's
			// steps are stored from a step later than the rows on disk.
			w.window += 1000
			w.newOnly = true
			for range 4 {
				w.push()
				w.window += 100
			}
			w.mu.Lock()
			b, err := w.tiered.EncodeCopy()
			w.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			const budgetRows = 20
			m2, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budgetRows * (8 + 4*4*2 + 14)})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			copied := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: m2})
			inMemory := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
			for _, s := range []*shard.Shard{copied, inMemory} {
				if err := s.DecodeCopy(b, time.Unix(0, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if s := m2.Stats(); s.HotRows > budgetRows || s.DiskRows == 0 {
				t.Fatalf("the copy holds %d rows in memory (budget %d rows), %d on disk", s.HotRows, budgetRows, s.DiskRows)
			}
			w.mu.Lock()
			want := w.ref.Cut().Shard()
			w.mu.Unlock()
			for name, s := range map[string]*shard.Shard{"with a disk tier": copied, "all in memory": inMemory} {
				if err := checkpoint.DiffTensors(likeRef(s.Cut().Shard(), want), want); err != nil {
					t.Fatalf("the copy %s differs from the shard: %v", name, err)
				}
			}
			// Train the copies on: the same as the original all in memory.
			w2 := &twinShards{t: t, layout: layout, m: m2, ref: w.ref, tiered: copied, rng: rand.New(rand.NewPCG(4, 4)), window: w.window}
			for range 40 {
				w2.push()
			}
			want = w.ref.Cut().Shard()
			if err := checkpoint.DiffTensors(likeRef(copied.Cut().Shard(), want), want); err != nil {
				t.Fatalf("the copy with a disk tier, trained on, differs: %v", err)
			}
		})
	}
}
