package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/vfs"
)

// BenchmarkCheckpointFTRL saves and restores one ps's FTRL table of
// PARAMSERV_CKPT_KEYS keys (1M by default, 100k under -short; the issue's
// figure is 10M) and compares both with a plain Go write+fsync and read of
// the same number of bytes on the same disk in the same run. The page cache
// is dropped (fadvise) before every read, so reads come from the disk.
//
// Reported: save_ratio and restore_ratio (baseline time / checkpoint time,
// 1.0 = at the disk's speed), the disk's MB/s, and push_pause_ms, the
// longest time a push of a stream of pushes took (lock, apply, unlock)
// while the save ran (the lock is held only to take the consistent copy);
// push_pause_not_cut_ms, the longest of those that did not overlap the
// cut's hold of the lock (they waited for the CPU on a loaded machine, or
// for the garbage collector); lock_held_ms, how long the save held the
// lock (and lock_held_cpu_ms, the CPU time of that, and lock_page_faults,
// the page faults taken under it: since cuts share the tables' pages
// copy-on-write these are small, and the pushes that follow a cut copy the
// pages they write, which push_pause_ms includes and push_pause_not_cut_ms
// counts as not the cut's; push_pause_first_ms is the longest of the first
// firstPushes pushes to end after the cut began, which waited for the
// lock or copied pages); and save_MB/cpu_s and restore_MB/cpu_s,
// the bytes per second of the process's CPU time (on a machine shared
// with other work the wall-clock ratios understate what a ps with a core
// to itself gets). The save takes the lock as the server does: once to
// read the tables' sizes, then, after allocating and mapping the copy's
// memory with no lock held, to copy (PARAMSERV_CKPT_NOMEM=1 copies into
// fresh memory instead, as Cut does, to compare). The restore reads the
// file as the server does, mapped, building the table while the checksum
// is computed (checkpoint.ReadShardOverlapped); PARAMSERV_CKPT_NOOVERLAP=1
// checks the whole file first (ReadShardMapped) and PARAMSERV_CKPT_NOMAP=1
// reads it into a buffer (ReadShard), to compare. The save writes the
// file as the server does, from Cut.StreamShard (the table's rows in the
// order its pages hold them, filled from the cut's pages as the file is
// written, with no sort); PARAMSERV_CKPT_NOSTREAM=1 builds the whole shard
// in memory first, sorted by key (Cut.Shard), to compare. The table is
// trained as a job trains it, by pushes of new keys, so its rows are in
// the order their keys first came, and so are the file's; the restore
// fills the table's pages in that order and builds its index as it goes
// (sparse.Table.ImportAnyOrder). PARAMSERV_CKPT_SORTED=1 imports the rows
// in key order instead, as a table restored from an older checkpoint holds
// them, to compare.
//
//	PARAMSERV_CKPT_KEYS=10000000 go test -run - -bench CheckpointFTRL -benchtime 1x ./internal/shard/
func BenchmarkCheckpointFTRL(b *testing.B) {
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
		b.Run(fmt.Sprintf("keys=%d/dim=%d", keys, dim), func(b *testing.B) {
			benchCheckpoint(b, keys, dim)
		})
	}
}

// trainedShard returns a shard holding one FTRL table of n rows trained as
// a job trains them: pushes of 1000 random keys each, so that rows are
// created, and stored, in the order their keys first come (insertion
// order, not key order).
func trainedShard(tb testing.TB, n, dim int) *Shard {
	layout := Layout{
		Tables:     []TableSpec{{Name: "emb", Dim: int32(dim)}},
		Optimizer:  optim.Config{Name: "ftrl", LearningRate: 0.05},
		NumWorkers: 1,
	}
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Parallel: testRunner})
	if _, err := s.Init(layout, nil); err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, uint64(dim)))
	const batch = 1000
	keys := make([]uint64, 0, batch)
	grads := randFloats(rng, batch*dim)
	for left := n; left > 0; left -= len(keys) {
		keys = keys[:0]
		for range min(batch, left) {
			keys = append(keys, rng.Uint64()) // a repeat in 2^64 would leave the table a row short
		}
		p := &Push{Worker: 0, Step: s.Step(), Sparse: []SparseGrad{{Table: []byte("emb"), Keys: keys, Values: grads[:len(keys)*dim], Bad: Unchecked}}}
		if err := s.Check(p); err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Apply(p, time.Now(), nil); err != nil {
			tb.Fatal(err)
		}
	}
	if got := s.st.tables["emb"].t.Len(); got != n {
		tb.Fatalf("trained %d rows, want %d", got, n)
	}
	return s
}

// ftrlShard returns a shard holding one FTRL table of n random rows,
// imported in key order (as a restored table's are).
func ftrlShard(tb testing.TB, n, dim int) *Shard {
	layout := Layout{
		Tables:     []TableSpec{{Name: "emb", Dim: int32(dim)}},
		Optimizer:  optim.Config{Name: "ftrl", LearningRate: 0.05},
		NumWorkers: 1,
	}
	s := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Parallel: testRunner})
	if _, err := s.Init(layout, nil); err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, uint64(dim)))
	snap := sparse.Snapshot{Dim: dim, Keys: make([]uint64, n), Values: randFloats(rng, n*dim),
		State: [][]float32{randFloats(rng, n*dim), randFloats(rng, n*dim)}}
	for i := range snap.Keys {
		snap.Keys[i] = rng.Uint64()
	}
	slices.Sort(snap.Keys)
	snap.Keys = slices.Compact(snap.Keys)
	for len(snap.Keys) < n { // a collision in 2^64: pad at the top
		snap.Keys = append(snap.Keys, snap.Keys[len(snap.Keys)-1]+1)
	}
	if err := s.st.tables["emb"].t.Import(snap); err != nil {
		tb.Fatal(err)
	}
	return s
}

// dropCache asks the kernel to forget the file's cached pages (they are
// clean after an fsync), so the next read comes from the disk.
func dropCache(tb testing.TB, path string) {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		tb.Logf("fadvise: %v (reads may come from the page cache)", err)
	}
}

// diskBaseline writes size bytes in 1 MiB writes, fsyncs and closes, then
// reads them back: the disk's sequential speed, as a plain Go program sees it.
func diskBaseline(tb testing.TB, dir string, size int64) (write, read time.Duration) {
	path := filepath.Join(dir, "baseline")
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	write = time.Since(start)
	dropCache(tb, path)
	start = time.Now()
	f, err = os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	for {
		k, err := f.Read(buf)
		if k == 0 || err != nil {
			break
		}
	}
	f.Close()
	read = time.Since(start)
	os.Remove(path)
	return write, read
}

// firstPushes is how many pushes after a cut push_pause_first_ms covers:
// enough for pushes of 100 random keys to have written every page of the
// table (copying it, after a copy-on-write cut).
const firstPushes = 200

func benchCheckpoint(b *testing.B, keys, dim int) {
	s := trainedShard(b, keys, dim)
	if os.Getenv("PARAMSERV_CKPT_SORTED") != "" { // to compare: a table in key order, as a restored one
		s = ftrlShard(b, keys, dim)
	}
	dir := b.TempDir()
	var mu sync.Mutex // the ps's lock around its shard

	// A worker pushing 100 rows at a time for as long as the save runs,
	// timing how long each push waits for the lock.
	rng := rand.New(rand.NewPCG(3, 4))
	var pushKeys []uint64
	for r := range s.st.tables["emb"].t.All() {
		if rng.IntN(keys/100+1) == 0 && len(pushKeys) < 100 {
			pushKeys = append(pushKeys, r.Key)
		}
	}
	grads := randFloats(rng, len(pushKeys)*dim)

	var saveT, restoreT, wT, rT, pause, held, heldCPU, saveCPU, restoreCPU time.Duration
	var size int64
	var pushes int
	var faults int64
	var pauseOther, pauseFirst time.Duration
	var saveRatios, restoreRatios []float64
	noMap := os.Getenv("PARAMSERV_CKPT_NOMAP") != ""         // to compare: read the file into a buffer
	noOverlap := os.Getenv("PARAMSERV_CKPT_NOOVERLAP") != "" // to compare: check the file before the copy
	noStream := os.Getenv("PARAMSERV_CKPT_NOSTREAM") != ""   // to compare: build the whole shard, then write it
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		step := int64(i)
		w, r := diskBaseline(b, dir, max(size, int64(keys*(8+12*dim))))
		wT += w
		rT += r
		b.StartTimer()
		save0, restore0 := saveT, restoreT

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var maxWait time.Duration
		var maxAt time.Time
		type wait struct{ from, to time.Time }
		var long []wait  // pushes that waited 10 ms or more
		var waits []wait // every push, to find the first after the cut
		n := 0
		wg.Add(1)
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
				w := time.Since(t0)
				if w > maxWait {
					maxWait, maxAt = w, t0
				}
				if w >= 10*time.Millisecond {
					long = append(long, wait{t0, t0.Add(w)})
				}
				waits = append(waits, wait{t0, t0.Add(w)})
				n++
				time.Sleep(100 * time.Microsecond)
			}
		}()
		time.Sleep(time.Millisecond)

		// As the server does: the copy's memory is allocated and mapped
		// with no lock held.
		start, cpu0 := time.Now(), cpuTime()
		mu.Lock()
		csize := s.CutSize()
		mu.Unlock()
		mem := csize.Alloc()
		if os.Getenv("PARAMSERV_CKPT_NOMEM") != "" { // to compare: the copy faults its memory in under the lock
			mem = nil
		}
		startHold := time.Now()
		mu.Lock()
		th0 := cpuTime() // the pushes wait: the CPU is the copy's
		flt0 := minFaults()
		cut := s.CutIn(mem)
		faults = max(faults, minFaults()-flt0)
		heldCPU = max(heldCPU, cpuTime()-th0)
		mu.Unlock()
		endHold := time.Now()
		heldRun := endHold.Sub(startHold)
		held = max(held, heldRun)
		var info checkpoint.ShardInfo
		var err error
		// Labelled, so that a CPU profile of the benchmark tells the
		// save's and the restore's work (on every goroutine) apart.
		pprof.Do(context.Background(), pprof.Labels("phase", "save"), func(context.Context) {
			sh := cut.StreamShard()
			if noStream {
				sh = cut.Shard()
			}
			info, err = checkpoint.WriteShard(vfs.OS, dir, 1000+step, 0, 1, sh)
			cut.Release()
		})
		if err != nil {
			b.Fatal(err)
		}
		saveT += time.Since(start)
		saveCPU += cpuTime() - cpu0
		close(stop)
		wg.Wait()
		pause = max(pause, maxWait)
		// A push that did not wait for the cut's lock waited for the CPU
		// (a loaded machine) or the garbage collector.
		var other time.Duration
		for _, w := range long {
			if w.to.Before(startHold) || w.from.After(endHold) {
				other = max(other, w.to.Sub(w.from))
			}
		}
		pauseOther = max(pauseOther, other)
		// The first pushes that end after the cut began: they waited for
		// the cut's lock, or copied the shared pages they wrote.
		var first time.Duration
		k := 0
		for _, w := range waits {
			if w.to.After(startHold) && k < firstPushes {
				first = max(first, w.to.Sub(w.from))
				k++
			}
		}
		pauseFirst = max(pauseFirst, first)
		b.Logf("run %d: push pause %.1f ms (began %.1f ms after the cut), first %d pushes %.1f ms, lock held %.1f ms", i,
			maxWait.Seconds()*1e3, maxAt.Sub(startHold).Seconds()*1e3, firstPushes, first.Seconds()*1e3, heldRun.Seconds()*1e3)
		pushes += n
		size = info.Size
		m := checkpoint.Manifest{Step: 1000 + step, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
		if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
			b.Fatal(err)
		}
		m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: int64(dim), Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
		if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
			b.Fatal(err)
		}
		cdir := filepath.Join(dir, checkpoint.CheckpointName(m.Step))
		dropCache(b, filepath.Join(cdir, info.File))

		start, cpu0 = time.Now(), cpuTime()
		rflt0, rsys0 := minFaults(), sysTime()
		var st *State
		pprof.Do(context.Background(), pprof.Labels("phase", "restore"), func(context.Context) {
			st, _, err = restoreOneFrom(m, dir, !noMap, !noOverlap)
		})
		if err != nil {
			b.Fatal(err)
		}
		rwall, rcpu := time.Since(start), cpuTime()-cpu0
		restoreT += rwall
		restoreCPU += rcpu
		// The kernel's share: page faults of memory the process has not
		// touched before (a fresh process's restore) and of the mapping.
		b.Logf("run %d: restore %.0f ms, CPU %.0f ms (system %.0f ms), %d page faults", i, rwall.Seconds()*1e3,
			rcpu.Seconds()*1e3, (sysTime()-rsys0).Seconds()*1e3, minFaults()-rflt0)
		if got := st.tables["emb"].t.Len(); got != keys {
			b.Fatalf("restored %d rows, want %d", got, keys)
		}
		b.StopTimer()
		saveRatios = append(saveRatios, w.Seconds()/(saveT-save0).Seconds())
		restoreRatios = append(restoreRatios, r.Seconds()/(restoreT-restore0).Seconds())
		b.Logf("run %d: save_ratio %.3f (%.0f ms, disk %.0f ms), restore_ratio %.3f (%.0f ms, disk %.0f ms)", i,
			saveRatios[i], (saveT-save0).Seconds()*1e3, w.Seconds()*1e3,
			restoreRatios[i], (restoreT-restore0).Seconds()*1e3, r.Seconds()*1e3)
		os.RemoveAll(cdir)
		b.StartTimer()
	}
	b.StopTimer()
	// Each run's ratio against the baseline measured just before it: the
	// median and range say more than the ratio of sums on a shared machine.
	slices.Sort(saveRatios)
	slices.Sort(restoreRatios)
	b.ReportMetric(saveRatios[len(saveRatios)/2], "save_ratio_med")
	b.ReportMetric(saveRatios[0], "save_ratio_min")
	b.ReportMetric(saveRatios[len(saveRatios)-1], "save_ratio_max")
	b.ReportMetric(restoreRatios[len(restoreRatios)/2], "restore_ratio_med")
	b.ReportMetric(restoreRatios[0], "restore_ratio_min")
	b.ReportMetric(restoreRatios[len(restoreRatios)-1], "restore_ratio_max")
	mb := float64(size) / 1e6
	b.ReportMetric(mb, "MB/save")
	b.ReportMetric(mb*float64(b.N)/wT.Seconds(), "disk_write_MB/s")
	b.ReportMetric(mb*float64(b.N)/rT.Seconds(), "disk_read_MB/s")
	b.ReportMetric(mb*float64(b.N)/saveT.Seconds(), "save_MB/s")
	b.ReportMetric(mb*float64(b.N)/restoreT.Seconds(), "restore_MB/s")
	b.ReportMetric(mb*float64(b.N)/saveCPU.Seconds(), "save_MB/cpu_s")
	b.ReportMetric(mb*float64(b.N)/restoreCPU.Seconds(), "restore_MB/cpu_s")
	b.ReportMetric(wT.Seconds()/saveT.Seconds(), "save_ratio")
	b.ReportMetric(rT.Seconds()/restoreT.Seconds(), "restore_ratio")
	b.ReportMetric(float64(pause.Microseconds())/1000, "push_pause_ms")
	b.ReportMetric(float64(pauseOther.Microseconds())/1000, "push_pause_not_cut_ms")
	b.ReportMetric(float64(pauseFirst.Microseconds())/1000, "push_pause_first_ms")
	b.ReportMetric(float64(held.Microseconds())/1000, "lock_held_ms")
	b.ReportMetric(float64(heldCPU.Microseconds())/1000, "lock_held_cpu_ms")
	b.ReportMetric(float64(faults), "lock_page_faults")
	b.ReportMetric(float64(pushes)/float64(b.N), "pushes/save")
}

// cpuTime is the process's user+system CPU time so far: on a shared machine
// the CPU a phase costs says more than its wall time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sysTime is the system part of cpuTime.
func sysTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Stime.Nano())
}

// minFaults is the process's minor page faults so far: the kernel mapping
// memory the process touches for the first time.
func minFaults() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}
