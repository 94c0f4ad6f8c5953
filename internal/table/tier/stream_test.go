package tier

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
)

// streamLayout is the layout of the checkpoints below: one Adagrad table
// of dim 8 (72 bytes of key, values and state a row), eviction on.
var streamLayout = shard.Layout{
	Tables:     []shard.TableSpec{{Name: "emb", Dim: 8, EvictAfterSteps: 5000}},
	Optimizer:  optim.Config{Name: "adagrad", LearningRate: 0.05},
	NumWorkers: 1,
}

// synthRows is a shard's rows of table emb: keys (ascending, or shuffled
// where anyOrder), values, Adagrad's accumulator, update counts and last
// touches below step.
type synthRows struct {
	keys    []uint64
	values  []float32
	accum   []float32
	updates []int64
	touch   []int64
}

func makeRows(rng *rand.Rand, keys []uint64, step int64) synthRows {
	const d = 8
	r := synthRows{keys: keys, values: make([]float32, len(keys)*d), accum: make([]float32, len(keys)*d),
		updates: make([]int64, len(keys)), touch: make([]int64, len(keys))}
	for i := range keys {
		for j := range d {
			r.values[i*d+j] = float32(rng.NormFloat64())
			r.accum[i*d+j] = float32(rng.ExpFloat64())
		}
		r.updates[i] = int64(rng.IntN(100))
		r.touch[i] = step - int64(rng.ExpFloat64()*float64(step)/4)%step
	}
	return r
}

// shardOf is r as a checkpoint's shard (a delta deleting del where delta).
func (r synthRows) shardOf(step int64, anyOrder, delta bool, parent int64, del []uint64) checkpoint.Shard {
	n := int64(len(r.keys))
	s := checkpoint.Shard{Step: step, AnyOrder: anyOrder, Delta: delta, Parent: parent, Tensors: []checkpoint.Tensor{
		checkpoint.Uint64TensorOf("emb/keys", []int64{n}, r.keys),
		checkpoint.Float32TensorOf("emb/values", []int64{n, 8}, r.values),
		checkpoint.Float32TensorOf(checkpoint.SlotName("emb", "adagrad_accum"), []int64{n, 8}, r.accum),
		checkpoint.Int64TensorOf(checkpoint.SlotName("emb", "updates"), []int64{n}, r.updates),
		checkpoint.Int64TensorOf(checkpoint.SlotName("emb", "last_touch"), []int64{n}, r.touch),
	}}
	if delta {
		s.Tensors = append(s.Tensors, checkpoint.Uint64TensorOf(checkpoint.DeletedName("emb"), []int64{int64(len(del))}, del))
	}
	return s
}

// writeCkpt writes the shards as the checkpoint of step (a delta of
// parent on base where parent >= 0).
func writeCkpt(t *testing.T, dir string, step, parent, base int64, shards []checkpoint.Shard) checkpoint.Manifest {
	t.Helper()
	m := checkpoint.Manifest{Step: step, Mode: "async", NumPS: len(shards), NumWorkers: 1}
	for k, s := range shards {
		info, err := checkpoint.WriteShard(vfs.OS, dir, step, k, len(shards), s)
		if err != nil {
			t.Fatal(err)
		}
		m.Shards = append(m.Shards, info)
	}
	if parent >= 0 {
		m.Kind, m.Parent, m.Base = checkpoint.KindDelta, parent, base
	}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: streamLayout.Optimizer, Tables: streamLayout.Tables}); err != nil {
		t.Fatal(err)
	}
	tb := checkpoint.TableInfo{Name: "emb", Dim: 8, Slots: []string{"adagrad_accum"}}
	for k := range shards {
		tb.Shards = append(tb.Shards, k)
	}
	m.Tables = []checkpoint.TableInfo{tb}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// heapPeak samples the heap's objects while f runs, and returns the most
// it saw above what was live before (after a GC) and the bytes it
// allocated in all. The collector runs at a tenth of the heap's growth
// meanwhile, so that what it sees is mostly live.
func heapPeak(f func()) (peak, allocated uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	base := read()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var most uint64
		for {
			most = max(most, read())
			select {
			case <-stop:
				done <- most
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	f()
	close(stop)
	most := <-done
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return most - min(most, base), after.TotalAlloc - before.TotalAlloc
}

// A restore into a disk tier of a table ten times its budget, re-sharded
// (2 ps onto 1) or from a delta chain (a full checkpoint and two deltas),
// reads the rows as a stream: the heap grows by the budget and bounded
// buffers, not by the table (as it did when the rows were gathered whole
// first), and the restored shard is the one restored all in memory, byte
// for byte.
func TestStreamingRestoreStaysInBudget(t *testing.T) {
	rows := 400_000
	if testing.Short() {
		rows = 150_000
	}
	const step = 10_000
	rng := rand.New(rand.NewPCG(7, 7))
	all := make([]uint64, rows)
	for i := range all {
		all[i] = rng.Uint64()
	}
	slices.Sort(all)
	all = slices.Compact(all)
	tableBytes := int64(len(all)) * (8 + 8*4*2 + 8 + 8)
	budget := tableBytes / 10
	// What a restore may add to the heap beyond the budget: the runs of
	// rows it reads (about 1 MiB, and the rows of a run it keeps, sorted),
	// the store's batches, memtables and compactions, the miss filter, the
	// keys the deltas changed. Measured: 9.5 MiB re-sharding, 14.4 MiB for
	// the chain; gathering the rows whole first took 109 and 188 MiB.
	const slack = 16 << 20

	cases := []struct {
		name  string
		write func(t *testing.T, dir string) checkpoint.Manifest
	}{
		{"reshard 2 onto 1", func(t *testing.T, dir string) checkpoint.Manifest {
			var parts [2][]uint64
			for _, k := range all {
				parts[placement.KeyShard(k, 2)] = append(parts[placement.KeyShard(k, 2)], k)
			}
			var shards []checkpoint.Shard
			for _, keys := range parts {
				// Written in table order (format v4): the keys shuffled.
				rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				shards = append(shards, makeRows(rng, keys, step).shardOf(step, true, false, 0, nil))
			}
			return writeCkpt(t, dir, step, -1, -1, shards)
		}},
		{"delta chain", func(t *testing.T, dir string) checkpoint.Manifest {
			keys := slices.Clone(all)
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			writeCkpt(t, dir, step, -1, -1, []checkpoint.Shard{makeRows(rng, keys, step).shardOf(step, true, false, 0, nil)})
			// Two deltas: each changes a tenth of the rows, adds new ones
			// and deletes some; the second changes rows the first did.
			parent := int64(step)
			var m checkpoint.Manifest
			for d := range 2 {
				at := parent + 100
				var changed, del []uint64
				for i, k := range all {
					switch {
					case i%10 == d || i%10 == 5:
						changed = append(changed, k)
					case i%97 == d:
						del = append(del, k)
					}
				}
				for range len(all) / 50 {
					changed = append(changed, rng.Uint64())
				}
				slices.Sort(changed)
				changed = slices.Compact(changed)
				changed = slices.DeleteFunc(changed, func(k uint64) bool { _, gone := slices.BinarySearch(del, k); return gone })
				sh := makeRows(rng, changed, at).shardOf(at, false, true, parent, del)
				m = writeCkpt(t, dir, at, parent, step, []checkpoint.Shard{sh})
				parent = at
			}
			return m
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			m := c.write(t, dir)
			contents, err := m.Contents()
			if err != nil {
				t.Fatal(err)
			}
			mgr, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budget})
			if err != nil {
				t.Fatal(err)
			}
			defer mgr.Close()
			// As the server reads them: files mapped, a delta as its chain.
			var releases []func()
			defer func() {
				for _, r := range releases {
					r()
				}
			}()
			read := func(k int) (*checkpoint.Shard, error) {
				sh, release, err := checkpoint.ReadShardMapped(vfs.OS, dir, m, k)
				releases = append(releases, release)
				return &sh, err
			}
			chain := func(k int) (*shard.Chain, error) {
				if !m.Shards[k].Delta {
					return nil, nil
				}
				links, release, err := checkpoint.ReadChain(vfs.OS, dir, m, k)
				releases = append(releases, release)
				if err != nil {
					return nil, err
				}
				ch := &shard.Chain{Rows: func(table string) (func(uint64) bool, []checkpoint.RowRef, error) {
					return checkpoint.ChainRows(links, table)
				}}
				for i := range links {
					ch.Links = append(ch.Links, &links[i])
				}
				return ch, nil
			}
			var st *shard.State
			peak, allocated := heapPeak(func() {
				st, err = shard.RestoreChainsInto(mgr, contents, read, chain, 0, 1, 1, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("table %.1f MiB, budget %.1f MiB: the restore's heap peaked %.1f MiB above its start, %.1f MiB allocated in all",
				float64(tableBytes)/(1<<20), float64(budget)/(1<<20), float64(peak)/(1<<20), float64(allocated)/(1<<20))
			if peak > uint64(budget)+slack {
				t.Errorf("the restore's heap grew by %.1f MiB, want at most the budget %.1f MiB + %d MiB (the table is %.1f MiB)",
					float64(peak)/(1<<20), float64(budget)/(1<<20), slack>>20, float64(tableBytes)/(1<<20))
			}
			tiered := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: mgr})
			tiered.Install(st)
			if s := mgr.Stats(); s.HotRows*mgr.tables[0].RowBytes() > budget || s.DiskRows == 0 {
				t.Errorf("after the restore: %d rows in memory (%d bytes, budget %d), %d on disk", s.HotRows, s.HotRows*mgr.tables[0].RowBytes(), budget, s.DiskRows)
			}
			ref := restoreShard(t, dir, m, nil, nil) // all in memory, the chain applied by ReadShard
			got, err := checkpoint.InKeyOrder(tiered.Cut().Shard(), m.Tables)
			if err != nil {
				t.Fatal(err)
			}
			want, err := checkpoint.InKeyOrder(ref.Cut().Shard(), m.Tables)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkpoint.DiffTensors(got, want); err != nil {
				t.Errorf("restored through the disk tier, the shard differs from the one restored all in memory: %v", err)
			}
			if n := len(want.ByName()["emb/keys"].Data) / 8; n < len(all)/2 {
				t.Fatalf("%d rows restored, want about %d", n, len(all))
			}
		})
	}
}

// A checkpoint of a shard whose table is ten times its disk tier's budget
// streams the rows on disk into the file (shard.Cut.StreamShard): the
// save's heap grows no more than the same table's save all in memory does
// (the writer's pieces), not by the table, as it did when the two tiers
// were merged in memory, sorted, before the file was written (2x the
// table). The file read back is the shard all in memory, and the tier's
// column files are gone after.
func TestStreamedSaveStaysInBudget(t *testing.T) {
	rows := 400_000
	if testing.Short() {
		rows = 200_000
	}
	const step = 10_000
	rng := rand.New(rand.NewPCG(8, 8))
	keys := make([]uint64, rows)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	tableBytes := int64(rows) * (8 + 8*4*2 + 8 + 8)
	budget := tableBytes / 10
	dir := t.TempDir()
	m := writeCkpt(t, dir, step, -1, -1, []checkpoint.Shard{makeRows(rng, keys, step).shardOf(step, true, false, 0, nil)})
	storeDir := t.TempDir() + "/s"
	mgr, err := Open(Config{Dir: storeDir, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	tiered := restoreShard(t, dir, m, mgr, nil)
	ref := restoreShard(t, dir, m, nil, nil)
	if s := mgr.Stats(); s.DiskRows < int64(rows)*8/10 {
		t.Fatalf("%d of %d rows on disk, want most", s.DiskRows, rows)
	}

	// save writes s's checkpoint into a directory of its own as a ps does,
	// and returns the manifest and the heap's growth meanwhile.
	save := func(s *shard.Shard) (checkpoint.Manifest, string, uint64) {
		out := t.TempDir()
		cut := s.Cut()
		var info checkpoint.ShardInfo
		var err error
		peak, _ := heapPeak(func() {
			sh := cut.StreamShard()
			if err = cut.Err(); err != nil {
				return
			}
			info, err = checkpoint.WriteShard(vfs.OS, out, step, 0, 1, sh)
			if err == nil {
				err = cut.Err()
			}
			cut.Release()
		})
		if err != nil {
			t.Fatal(err)
		}
		mm := m
		mm.Shards = []checkpoint.ShardInfo{info}
		return mm, out, peak
	}
	_, _, refPeak := save(ref)
	mt, out, peak := save(tiered)
	t.Logf("table %.1f MiB, budget %.1f MiB: the save's heap grew %.1f MiB with a disk tier, %.1f MiB all in memory",
		float64(tableBytes)/(1<<20), float64(budget)/(1<<20), float64(peak)/(1<<20), float64(refPeak)/(1<<20))
	const slack = 4 << 20 // the tier's write buffers, a column each, and a page
	if peak > refPeak+slack {
		t.Errorf("the tiered save's heap grew by %.1f MiB, want at most the in-memory save's %.1f MiB + %d MiB (the table is %.1f MiB)",
			float64(peak)/(1<<20), float64(refPeak)/(1<<20), slack>>20, float64(tableBytes)/(1<<20))
	}

	back, err := checkpoint.ReadShard(vfs.OS, out, mt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !back.AnyOrder {
		t.Error("the tiered save's shard is not marked AnyOrder")
	}
	got, err := checkpoint.InKeyOrder(back, mt.Tables)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.DiffTensors(got, ref.Cut().Shard()); err != nil {
		t.Errorf("the tiered save read back differs from the shard all in memory: %v", err)
	}
	left, err := filepath.Glob(filepath.Join(storeDir, "cut-*"))
	if err != nil || len(left) > 0 {
		t.Errorf("the tier's column files left after the save: %v (%v)", left, err)
	}
}

// A tiered save whose column files cannot be read back as the file is
// written (here cut short under it) reports it (Cut.Err), so that the ps
// fails the save instead of keeping a file of wrong bytes.
func TestStreamedSaveReportsAColumnLost(t *testing.T) {
	layout := shard.Layout{
		Tables:     []shard.TableSpec{{Name: "emb", Dim: 4}},
		Optimizer:  optim.Config{Name: "adagrad", LearningRate: 0.1},
		NumWorkers: 1,
	}
	w := newTwinShards(t, layout, 0, 11)
	for range 40 {
		w.push()
	}
	if w.m.Stats().DiskRows == 0 {
		t.Fatal("no row on disk: the test needs some")
	}
	w.mu.Lock()
	cut := w.tiered.Cut()
	w.mu.Unlock()
	sh := cut.StreamShard()
	if err := cut.Err(); err != nil {
		t.Fatal(err)
	}
	cols, err := filepath.Glob(filepath.Join(w.m.cfg.Dir, "cut-*"))
	if err != nil || len(cols) == 0 {
		t.Fatalf("no column files in %s (%v)", w.m.cfg.Dir, err)
	}
	for _, c := range cols {
		if err := os.Truncate(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	_, err = checkpoint.WriteShard(vfs.OS, t.TempDir(), 1, 0, 1, sh)
	if err == nil {
		err = cut.Err()
	}
	cut.Release()
	if err == nil {
		t.Fatal("the save read columns cut short, and reported nothing")
	}
	t.Log(err)
	if left, _ := filepath.Glob(filepath.Join(w.m.cfg.Dir, "cut-*")); len(left) > 0 {
		t.Errorf("column files left after Release: %v", left)
	}
}
