package tier

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
)

// twinShards drives a shard all in memory (ref) and one whose table has a
// disk tier (tiered) with the same pushes, the tier's background rounds
// run between them.
type twinShards struct {
	t           *testing.T
	layout      shard.Layout
	m           *Manager
	mu          sync.Mutex
	ref, tiered *shard.Shard
	rng         *rand.Rand
	window      float64 // keys are drawn around it, so that old rows go cold
	newOnly     bool    // draw no old keys
}

func newTwinShards(t *testing.T, layout shard.Layout, budget int64, seed uint64) *twinShards {
	m, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	w := &twinShards{t: t, layout: layout, m: m, rng: rand.New(rand.NewPCG(seed, 3))}
	w.ref = shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	w.tiered = shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: m})
	for _, s := range []*shard.Shard{w.ref, w.tiered} {
		if _, err := s.Init(layout, nil); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// push pulls and pushes a batch of keys on both shards, then runs a round
// of the tier: rows go out to disk past the budget, and come back when
// pulled again.
func (w *twinShards) push() {
	t := w.t
	keys := make([]uint64, 0, 16)
	seen := map[uint64]bool{}
	for range 16 {
		k := uint64(w.window + w.rng.ExpFloat64()*40)
		if !w.newOnly && w.rng.IntN(6) == 0 {
			k = w.rng.Uint64N(uint64(w.window) + 50) // an old row, most likely on disk
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	dim := int(w.layout.Tables[0].Dim)
	g := make([]float32, dim*len(keys))
	for i := range g {
		g[i] = float32(w.rng.NormFloat64())
	}
	for _, s := range []*shard.Shard{w.ref, w.tiered} {
		w.mu.Lock()
		pullPush(t, s, keys, g)
		w.mu.Unlock()
	}
	if err := w.m.Round(&w.mu, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	w.window += 0.5
}

// save writes checkpoint id of s into dir, incremental against parent
// (-1: full), as a ps and the chief do (a full one streamed, the tier's
// rows after the memory's), and returns its manifest and the shard
// written (a full one as read back, in key order).
func (w *twinShards) save(s *shard.Shard, dir string, id, parent, base int64) (checkpoint.Manifest, checkpoint.Shard) {
	t := w.t
	w.mu.Lock()
	cut := s.CutIncremental(id, parent)
	w.mu.Unlock()
	sh := cut.StreamShard()
	if err := cut.Err(); err != nil {
		t.Fatal(err)
	}
	info, err := checkpoint.WriteShard(vfs.OS, dir, id, 0, 1, sh)
	if err == nil {
		err = cut.Err()
	}
	cut.Release()
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint.Manifest{Step: id, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
	if info.Delta {
		m.Kind, m.Parent, m.Base = checkpoint.KindDelta, parent, base
	}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: w.layout.Optimizer, Tables: w.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	rule, err := optim.New(w.layout.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: int64(w.layout.Tables[0].Dim), Slots: shard.SlotNames(rule.Name(), rule.StateSlots()), Shards: []int{0}}}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	if !info.Delta {
		// Streamed: read it back, in key order.
		back, err := checkpoint.ReadShard(vfs.OS, dir, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		if sh, err = checkpoint.InKeyOrder(back, m.Tables); err != nil {
			t.Fatal(err)
		}
	}
	return m, sh
}

// A delta checkpoint of a shard whose table has a disk tier holds the rows
// changed since its parent in either tier: rows changed in memory and
// moved to disk since, rows on disk promoted, changed and demoted again,
// rows dropped on disk past eviction. It is the same delta, byte for byte,
// as the one of the same shard all in memory; and the full checkpoint and
// the delta read back (and restored into a tiered shard) are the rows and
// optimizer state of the live shard.
func TestDeltaCheckpointCoversBothTiers(t *testing.T) {
	forEachEngine(t, testDeltaCheckpointCoversBothTiers)
}

func testDeltaCheckpointCoversBothTiers(t *testing.T) {
	for _, rule := range []string{"adagrad", "adam", "ftrl"} {
		for _, budget := range []int64{0, 1500, 1 << 30} {
			for _, evict := range []int64{0, 8} {
				t.Run(fmt.Sprintf("%s/budget%d/evict%d", rule, budget, evict), func(t *testing.T) {
					layout := shard.Layout{
						Tables:     []shard.TableSpec{{Name: "emb", Dim: 3, MinCount: 2, EvictAfterSteps: evict}},
						Optimizer:  optim.Config{Name: rule, LearningRate: 0.1},
						NumWorkers: 1,
					}
					w := newTwinShards(t, layout, budget, uint64(budget)+uint64(evict))
					refDir, tierDir := t.TempDir(), t.TempDir()
					for range 40 {
						w.push()
					}
					w.save(w.ref, refDir, 10, -1, -1)
					w.save(w.tiered, tierDir, 10, -1, -1)
					parent := int64(10)
					var m checkpoint.Manifest
					for i, id := range []int64{20, 30} {
						for range 30 + 10*i {
							w.push()
						}
						_, want := w.save(w.ref, refDir, id, parent, 10)
						var got checkpoint.Shard
						m, got = w.save(w.tiered, tierDir, id, parent, 10)
						if !got.Delta {
							t.Fatalf("checkpoint %d with a disk tier is a full one, not a delta", id)
						}
						if err := checkpoint.DiffTensors(likeRef(got, want), want); err != nil {
							t.Fatalf("checkpoint %d: the delta with a disk tier differs from the one all in memory: %v", id, err)
						}
						parent = id
					}
					st := w.m.Stats()
					if budget < 1<<30 && (st.Demotions == 0 || st.Promotions == 0) {
						t.Fatalf("%d demotions, %d promotions: the test needs both", st.Demotions, st.Promotions)
					}
					if evict > 0 && budget == 0 && st.Evicted == 0 {
						t.Fatal("no row was dropped on disk past eviction: the test needs some")
					}
					w.mu.Lock()
					live := w.ref.Cut()
					w.mu.Unlock()
					want := live.Shard()
					got, err := checkpoint.ReadShard(vfs.OS, tierDir, m, 0)
					if err != nil {
						t.Fatal(err)
					}
					if got, err = checkpoint.InKeyOrder(got, m.Tables); err != nil { // a streamed base
						t.Fatal(err)
					}
					if err := checkpoint.DiffTensors(likeRef(got, want), want); err != nil {
						t.Fatalf("full + deltas read back differ from the live shard: %v", err)
					}
					w.mu.Lock()
					live = w.tiered.Cut()
					w.mu.Unlock()
					if err := checkpoint.DiffTensors(got, live.Shard()); err != nil {
						t.Fatalf("full + deltas read back differ from the live tiered shard's cut: %v", err)
					}
				})
			}
		}
	}
}

// likeRef is got without the tensors ref lacks: a table with a disk tier
// keeps every row's last-touched step, which one all in memory keeps only
// to evict.
func likeRef(got, ref checkpoint.Shard) checkpoint.Shard {
	has := map[string]bool{}
	for _, x := range ref.Tensors {
		has[x.Name] = true
	}
	out := got
	out.Tensors = nil
	for _, x := range got.Tensors {
		if has[x.Name] {
			out.Tensors = append(out.Tensors, x)
		}
	}
	return out
}

// restoreShard restores the checkpoint m of dir into a new shard with tiers
// (nil: all in memory), through check, which sees the state built before
// it is installed.
func restoreShard(t *testing.T, dir string, m checkpoint.Manifest, tiers shard.Tiers, check func()) *shard.Shard {
	t.Helper()
	c, err := m.Contents()
	if err != nil {
		t.Fatal(err)
	}
	st, err := shard.RestoreInto(tiers, c, func(k int) (*checkpoint.Shard, error) {
		sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
		return &sh, err
	}, 0, 1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if check != nil {
		check()
	}
	s := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: tiers})
	s.Install(st)
	return s
}

// A checkpoint whose table is larger than the budget restores with no
// more rows in memory than the budget holds: the rest go straight to the
// store. The restored shard cuts the checkpoint's bytes, and trains on as
// one restored all in memory does, and takes deltas against it.
func TestRestoreIntoTheStore(t *testing.T) { forEachEngine(t, testRestoreIntoTheStore) }

func testRestoreIntoTheStore(t *testing.T) {
	for _, evict := range []int64{0, 30} {
		t.Run(fmt.Sprintf("evict%d", evict), func(t *testing.T) {
			layout := shard.Layout{
				Tables:     []shard.TableSpec{{Name: "emb", Dim: 4, EvictAfterSteps: evict}},
				Optimizer:  optim.Config{Name: "adam", LearningRate: 0.1},
				NumWorkers: 1,
			}
			w := newTwinShards(t, layout, 0, 5)
			for range 80 {
				w.push()
			}
			dir := t.TempDir()
			base := w.tiered.Step() // a restore keeps last touches within the checkpoint's step
			m, full := w.save(w.tiered, dir, base, -1, -1)
			rows := 0
			for _, x := range full.Tensors {
				if x.Name == "emb/keys" {
					rows = len(x.Data) / 8
				}
			}
			const budgetRows = 20
			m2, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budgetRows * (8 + 4*4*3 + 14)})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			tiered := restoreShard(t, dir, m, m2, func() {
				m2.stageMu.Lock()
				defer m2.stageMu.Unlock()
				if len(m2.staged) != 1 {
					t.Fatalf("%d tables loaded, want 1", len(m2.staged))
				}
				for _, tt := range m2.staged {
					if n := tt.hot.Len(); n > budgetRows || int(tt.onDisk) != rows-n {
						t.Fatalf("restored %d of %d rows in memory (budget %d rows), %d on disk", n, rows, budgetRows, tt.onDisk)
					}
				}
			})
			ref := restoreShard(t, dir, m, nil, nil)
			if s := m2.Stats(); s.DiskRows < int64(rows-budgetRows) || s.HotRows > budgetRows {
				t.Fatalf("after the restore: %d rows in memory, %d on disk, of %d", s.HotRows, s.DiskRows, rows)
			}
			if err := checkpoint.DiffTensors(tiered.Cut().Shard(), full); err != nil {
				t.Fatalf("the restored shard's cut differs from the checkpoint: %v", err)
			}
			w2 := &twinShards{t: t, layout: layout, m: m2, ref: ref, tiered: tiered, rng: rand.New(rand.NewPCG(9, 9)), window: w.window}
			refDir, tierDir := t.TempDir(), t.TempDir()
			w2.save(w2.ref, refDir, base, -1, -1) // the base of the deltas below (the same bytes as full)
			for range 40 {
				w2.push()
			}
			_, want := w2.save(w2.ref, refDir, base+40, base, base)
			_, got := w2.save(w2.tiered, tierDir, base+40, base, base)
			if !got.Delta {
				t.Fatal("a restored tiered shard's next cut is not a delta")
			}
			if err := checkpoint.DiffTensors(likeRef(got, want), want); err != nil {
				t.Fatalf("after the restore, the delta with a disk tier differs from the one all in memory: %v", err)
			}
			if err := checkpoint.DiffTensors(likeRef(tiered.Cut().Shard(), ref.Cut().Shard()), ref.Cut().Shard()); err != nil {
				t.Fatalf("after training on: %v", err)
			}
		})
	}
}
