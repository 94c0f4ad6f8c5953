package shard

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/vfs"
)

// BenchmarkCheckpointIncremental compares, on one ps's FTRL table of
// PARAMSERV_CKPT_KEYS keys (1M by default, 100k under -short), a full save
// with an incremental one after 1% of the rows were touched (pushed)
// since the previous save, both while a worker pushes 100 rows at a time:
//
//	full_MB, incr_MB       bytes written per save
//	bytes_ratio            incr_MB / full_MB
//	full_s, incr_s         wall time of a save (cut, encode, write, fsync)
//	full_pause_ms,         the longest a push waited for the ps's lock
//	incr_pause_ms          during a save
//	incr_lock_held_ms      how long the incremental cut held the lock
//	read_full_s,           ReadShard of the last full save, and of the
//	read_chain_s           last incremental one: its full base and b.N
//	                       deltas applied (the files in the page cache)
//
//	go test -run - -bench CheckpointIncremental -benchtime 5x ./internal/shard/
func BenchmarkCheckpointIncremental(b *testing.B) {
	keys := 1_000_000
	if testing.Short() {
		keys = 100_000
	}
	if s := os.Getenv("PARAMSERV_CKPT_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("PARAMSERV_CKPT_KEYS=%q: want a positive number of keys", s)
		}
		keys = n
	}
	for _, dim := range []int{1, 8} {
		b.Run(fmt.Sprintf("keys=%d/dim=%d/touched=1%%", keys, dim), func(b *testing.B) {
			benchIncremental(b, keys, dim)
		})
	}
}

func benchIncremental(b *testing.B, keys, dim int) {
	s := ftrlShard(b, keys, dim)
	dir := b.TempDir()
	var mu sync.Mutex // the ps's lock
	all := make([]uint64, 0, keys)
	for r := range s.st.tables["emb"].t.All() {
		all = append(all, r.Key)
	}
	rng := rand.New(rand.NewPCG(5, uint64(dim)))
	push := func(ks []uint64) {
		p := &Push{Worker: 0, Step: s.Step(), Sparse: []SparseGrad{{Table: []byte("emb"), Keys: ks, Values: randFloats(rng, len(ks)*dim), Bad: Unchecked}}}
		if err := s.Check(p); err != nil {
			panic(err)
		}
		if _, err := s.Apply(p, time.Now(), nil); err != nil {
			panic(err)
		}
	}
	// touch pushes 1% of the rows, 100 distinct keys at a time.
	touch := func() {
		for i := 0; i < keys/100; i += 100 {
			ks := make([]uint64, 0, 100)
			seen := map[uint64]bool{}
			for len(ks) < min(100, keys/100-i) {
				k := all[rng.IntN(len(all))]
				if !seen[k] {
					seen[k] = true
					ks = append(ks, k)
				}
			}
			push(ks)
		}
	}
	pushKeys := all[:100]
	// save writes checkpoint id while a worker pushes, and reports the
	// bytes, the time, the longest push wait and the lock hold.
	save := func(id int64, cut func() *Cut) (info checkpoint.ShardInfo, took, pause, held time.Duration) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		prng := rand.New(rand.NewPCG(9, 9))
		grads := randFloats(prng, len(pushKeys)*dim)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				mu.Lock()
				p := &Push{Worker: 0, Step: s.Step(), Sparse: []SparseGrad{{Table: []byte("emb"), Keys: pushKeys, Values: grads, Bad: Unchecked}}}
				if err := s.Check(p); err != nil {
					panic(err)
				}
				if _, err := s.Apply(p, time.Now(), nil); err != nil {
					panic(err)
				}
				mu.Unlock()
				pause = max(pause, time.Since(t0))
				time.Sleep(100 * time.Microsecond)
			}
		}()
		time.Sleep(time.Millisecond)
		start := time.Now()
		mu.Lock()
		c := cut()
		mu.Unlock()
		held = time.Since(start)
		info, err := checkpoint.WriteShard(vfs.OS, dir, id, 0, 1, c.Shard())
		if err != nil {
			b.Fatal(err)
		}
		took = time.Since(start)
		close(stop)
		wg.Wait()
		return info, took, pause, held
	}
	// The saves to read back at the end: the last full one, and the
	// incremental chain.
	var fullID int64
	var fullInfo checkpoint.ShardInfo
	var chainIDs []int64
	var chainInfos []checkpoint.ShardInfo
	var fullB, incrB int64
	var fullT, incrT, fullP, incrP, incrH time.Duration
	id := int64(0)
	parent := int64(-1)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		mu.Lock()
		touch()
		mu.Unlock()
		b.StartTimer()
		// A full save of the state, as a job without incremental
		// checkpoints writes it (and as every full_checkpoint_every-th
		// save does)...
		id++
		info, took, pause, _ := save(id, func() *Cut { return s.Cut() })
		fullB, fullT, fullP = fullB+info.Size, fullT+took, max(fullP, pause)
		fullID, fullInfo = id, info
		// ...then the incremental save of the same interval: the first
		// one is full, and starts the chain.
		if parent < 0 {
			id++
			parent = id
			info, _, _, _ := save(id, func() *Cut { return s.CutIncremental(parent, -1) })
			chainIDs, chainInfos = append(chainIDs, id), append(chainInfos, info)
			b.StopTimer()
			mu.Lock()
			touch()
			mu.Unlock()
			b.StartTimer()
		}
		id++
		p := parent
		info, took, pause, held := save(id, func() *Cut { return s.CutIncremental(id, p) })
		if !info.Delta {
			b.Fatal("an incremental save after the first is full")
		}
		chainIDs, chainInfos = append(chainIDs, id), append(chainInfos, info)
		parent = id
		incrB, incrT, incrP, incrH = incrB+info.Size, incrT+took, max(incrP, pause), max(incrH, held)
	}
	b.StopTimer()
	write := func(step int64, info checkpoint.ShardInfo) checkpoint.Manifest {
		m := checkpoint.Manifest{Step: step, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info},
			Tables: []checkpoint.TableInfo{{Name: "emb", Dim: int64(dim), Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}}
		if info.Delta {
			m.Kind, m.Parent, m.Base = checkpoint.KindDelta, info.Parent, chainIDs[0]
		}
		if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
			b.Fatal(err)
		}
		return m
	}
	var last checkpoint.Manifest
	for i, info := range chainInfos {
		last = write(chainIDs[i], info)
	}
	full := write(fullID, fullInfo)
	t0 := time.Now()
	want, err := checkpoint.ReadShard(vfs.OS, dir, full, 0)
	if err != nil {
		b.Fatal(err)
	}
	readFull := time.Since(t0)
	t0 = time.Now()
	got, err := checkpoint.ReadShard(vfs.OS, dir, last, 0)
	if err != nil {
		b.Fatal(err)
	}
	readChain := time.Since(t0)
	// The chain's last link holds the pushes made during its save, the
	// full save before it not: compare the keys only.
	if g, w := got.ByName()["emb/keys"], want.ByName()["emb/keys"]; len(g.Data) != len(w.Data) {
		b.Fatalf("the chain has %d bytes of keys, the full save %d", len(g.Data), len(w.Data))
	}
	n := float64(b.N)
	b.ReportMetric(float64(fullB)/n/1e6, "full_MB")
	b.ReportMetric(float64(incrB)/n/1e6, "incr_MB")
	b.ReportMetric(float64(incrB)/float64(fullB), "bytes_ratio")
	b.ReportMetric(fullT.Seconds()/n, "full_s")
	b.ReportMetric(incrT.Seconds()/n, "incr_s")
	b.ReportMetric(float64(fullP.Microseconds())/1000, "full_pause_ms")
	b.ReportMetric(float64(incrP.Microseconds())/1000, "incr_pause_ms")
	b.ReportMetric(float64(incrH.Microseconds())/1000, "incr_lock_held_ms")
	b.ReportMetric(readFull.Seconds(), "read_full_s")
	b.ReportMetric(readChain.Seconds(), "read_chain_s")
}
