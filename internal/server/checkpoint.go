package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/progress"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// confine checks that a directory named by a request is the ps's own
// --checkpoint_dir (or inside it): a client must not make the ps write or
// read files anywhere else.
func (s *Server) confine(dir string) (string, error) {
	d, err := checkpoint.Within(s.cfg.CheckpointDir, dir)
	if err != nil {
		return "", fmt.Errorf("ps %d: %w", s.cfg.Task, err)
	}
	return d, nil
}

// writeCheckpoint does the work of Checkpoint. A synchronous shard not at
// the step asked for is a Restored error (Aborted in gRPC).
func (s *Server) writeCheckpoint(req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	if req.Dir == "" || req.NumShards != int32(s.cfg.NumPS) {
		return nil, kindErrorf(shard.Invalid, "ps %d: checkpoint needs a directory and %d shards, got %q and %d", s.cfg.Task, s.cfg.NumPS, req.Dir, req.NumShards)
	}
	dir, err := s.confine(req.Dir)
	if err != nil {
		return nil, &shard.Error{Kind: shard.Invalid, Msg: err.Error()}
	}
	if req.Step < 0 {
		return nil, kindErrorf(shard.Invalid, "ps %d: checkpoint of step %d: want a step >= 0", s.cfg.Task, req.Step)
	}
	begin, cpu := time.Now(), processCPU()
	s.stalls.begin()
	stalls := ""
	defer func() {
		if stalls == "" {
			s.stalls.end()
		}
	}()
	// A full cut's memory, which the pushes after the cut copy the pages
	// they write into, is allocated and mapped by the kernel before the
	// lock is taken: the first push after a cut copies every page it
	// touches, and into fresh memory that costs it a page fault each 4 KiB
	// under the lock (in a 2-worker job at load 35, tried: pushes waited
	// 0.7-2.7 s).
	//
	// With one worker in synchronous training, the chief that asks for
	// the save is the only one that pushes, and it waits for the save: no
	// push copies a page, and mapping a table's worth of memory would cost
	// the save as much as writing it (on the 3.1M-key job, about 100 ms on
	// a quiet machine). Only the index's copy, taken under the lock, gets
	// its memory then; a push that comes all the same copies its pages
	// into memory it maps. In asynchronous training the chief trains on
	// while its periodic saves are written (lifecycle's saver).
	var mem *shard.CutMem
	if !req.Incremental {
		s.mu.Lock()
		size := s.shard.CutSize()
		sync := s.shard.Sync()
		s.mu.Unlock()
		if s.cfg.NumWorkers == 1 && sync {
			size = size.IndexOnly()
		}
		mem = size.Alloc()
	}
	s.mu.Lock()
	locked := time.Now()
	if !s.shard.Initialized() {
		s.mu.Unlock()
		return nil, s.notInitialized()
	}
	if s.shard.Sync() && s.shard.Step() != req.Step {
		step := s.shard.Step()
		s.mu.Unlock()
		return nil, kindErrorf(shard.Restored, "ps %d is at step %d, not %d: a synchronous checkpoint must cut every shard at the same step", s.cfg.Task, step, req.Step)
	}
	// Under the lock only a memory copy of the state (of what changed
	// since the parent, for a delta); pushes go on while it is sorted,
	// encoded and written.
	var cut *shard.Cut
	if req.Incremental {
		cut = s.shard.CutIncremental(req.Step, req.Parent)
	} else {
		cut = s.shard.CutIn(mem)
	}
	s.mu.Unlock()

	start := time.Now()
	held := start.Sub(locked)
	sh := cut.StreamShard() // tables are read as the file is written
	if err := cut.Err(); err != nil {
		cut.Release()
		s.cfg.Logf("checkpoint at step %d failed: %v", req.Step, err)
		if d, ok := s.cfg.Tiers.(shard.TierDamage); ok {
			if derr, damaged := d.Damaged(err); damaged {
				// Its rows are lost, not the job: the chief skips this
				// checkpoint while the ps restarts and restores.
				return nil, kindErrorf(shard.NotReady, "ps %d: reading its disk tier for the checkpoint: %v; the ps restarts and restores its shard from the newest checkpoint", s.cfg.Task, derr)
			}
		}
		return nil, kindErrorf(shard.Internal, "ps %d: reading its disk tier for the checkpoint: %v", s.cfg.Task, err)
	}
	info, err := checkpoint.WriteShard(s.cfg.FS, dir, req.Step, s.cfg.Task, s.cfg.NumPS, sh)
	if cerr := cut.Err(); err == nil && cerr != nil {
		// A disk tier's rows, read as the file was written, could not be:
		// the file's bytes are wrong, and no manifest will name it.
		err = fmt.Errorf("reading its disk tier's rows as the file was written: %w", cerr)
	}
	cut.Release()
	s.cfg.Observer.CheckpointSaved(info.Size, time.Since(start), err)
	if err != nil {
		s.cfg.Logf("checkpoint at step %d failed: %v", req.Step, err)
		return nil, kindErrorf(shard.Internal, "ps %d: writing its checkpoint shard: %v", s.cfg.Task, err)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, &shard.Error{Kind: shard.Internal, Msg: err.Error()}
	}
	kind := ""
	if info.Delta {
		kind = fmt.Sprintf(", a delta of %s", checkpoint.CheckpointName(info.Parent))
	} else if req.Incremental && req.Parent >= 0 {
		kind = fmt.Sprintf(", full: this ps holds no cut of %s to take a delta against", checkpoint.CheckpointName(req.Parent))
	}
	s.mu.Lock()
	s.savedStep = max(s.savedStep, sh.Step)
	s.mu.Unlock()
	stalls = s.stalls.end()
	s.cfg.Logf("checkpoint: wrote %s of step %d (cut at step %d, %d bytes%s) in %s; with the cut %s (lock held %s; the process's CPU meanwhile %s), %s", info.File, req.Step, sh.Step, info.Size, kind,
		time.Since(start).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond), held.Round(10*time.Microsecond),
		time.Duration(processCPU()-cpu).Round(time.Millisecond), stalls)
	return &pb.CheckpointResponse{ShardInfo: b, CutStep: sh.Step}, nil
}

// RestoreLatest restores the latest valid checkpoint of Config.CheckpointDir,
// logging each newer one it had to skip and why. It reports false when there
// is none (the ps then waits for the chief's Init).
func (s *Server) RestoreLatest() (bool, error) {
	if s.cfg.CheckpointDir == "" {
		return false, nil
	}
	verify := s.meter("checkpoint: verifying the newest checkpoint", 0)
	m, skipped, err := checkpoint.Verifier{Finite: true}.LatestSetAside(meteredFS{s.cfg.FS, verify}, s.cfg.CheckpointDir)
	verify.done()
	for _, sk := range skipped {
		s.cfg.Logf("checkpoint: %s; trying an older one", sk)
	}
	if errors.Is(err, checkpoint.ErrNotFound) {
		s.cfg.Logf("checkpoint: no valid checkpoint in %s; waiting for the chief to initialise", s.cfg.CheckpointDir)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.restore(s.cfg.CheckpointDir, m, true); err != nil {
		return false, err
	}
	return true, nil
}

// restoreStep does the work of Restore. A checkpoint it cannot read or
// restore is a NotReady error (FailedPrecondition in gRPC).
func (s *Server) restoreStep(req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	dir, err := s.confine(req.Dir)
	if err != nil {
		return nil, &shard.Error{Kind: shard.Invalid, Msg: err.Error()}
	}
	m, err := checkpoint.Verifier{Finite: true}.Load(s.cfg.FS, dir, req.Step)
	if err != nil {
		return nil, kindErrorf(shard.NotReady, "ps %d: checkpoint of step %d in %s: %v", s.cfg.Task, req.Step, dir, err)
	}
	if err := s.restore(dir, m, false); err != nil {
		return nil, kindErrorf(shard.NotReady, "ps %d: %v", s.cfg.Task, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &pb.RestoreResponse{GlobalStep: s.shard.Step(), Incarnation: s.shard.Incarnation()}, nil
}

// restore reads the checkpoint m of dir and builds its state with no lock
// held (the files may be large), then installs it under the lock.
func (s *Server) restore(dir string, m checkpoint.Manifest, atStart bool) error {
	start, cpu := time.Now(), processCPU()
	var bytes int64
	meter := s.meter(fmt.Sprintf("checkpoint: restoring step %d", m.Step), restoreSize(m, s.cfg.Task, s.cfg.NumPS))
	fsys := meteredFS{s.cfg.FS, meter}
	// The files are mapped where they can be (Restore copies what it
	// keeps), and released once the state is built.
	var releases []func()
	read := func(k int) (*checkpoint.Shard, error) {
		sh, release, err := checkpoint.ReadShardOverlapped(fsys, dir, m, k)
		releases = append(releases, release)
		if err == nil && k < len(m.Shards) {
			bytes += m.Shards[k].Size
		}
		return &sh, err
	}
	// With a disk tier, a delta's chain is read as its files lie and its
	// rows streamed into the tier, not applied in memory first.
	chain := func(k int) (*shard.Chain, error) {
		if k < 0 || k >= len(m.Shards) || !m.Shards[k].Delta {
			return nil, nil
		}
		links, release, err := checkpoint.ReadChain(fsys, dir, m, k)
		releases = append(releases, release)
		if err != nil {
			return nil, err
		}
		bytes += m.Shards[k].Size
		ch := &shard.Chain{Rows: func(table string) (func(uint64) bool, []checkpoint.RowRef, error) {
			return checkpoint.ChainRows(links, table)
		}}
		for i := range links {
			ch.Links = append(ch.Links, &links[i])
		}
		return ch, nil
	}
	c, err := m.Contents()
	var st *shard.State
	if err == nil {
		st, err = shard.RestoreChainsInto(s.cfg.Tiers, c, read, chain, s.cfg.Task, s.cfg.NumPS, s.cfg.NumWorkers, s.shard.Config().Parallel)
	}
	for _, release := range releases {
		release()
	}
	if err == nil {
		meter.done()
	}
	s.cfg.Observer.CheckpointRestored(atStart, bytes, time.Since(start), err)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.shard.Install(st)
	s.notify()
	s.mu.Unlock()
	how := ""
	if m.IsDelta() {
		how = fmt.Sprintf(", a delta of %s in a chain from the full %s", checkpoint.CheckpointName(m.Parent), checkpoint.CheckpointName(m.Base))
	}
	if m.NumPS != s.cfg.NumPS {
		how += fmt.Sprintf(", re-sharded from %d ps to %d", m.NumPS, s.cfg.NumPS)
	}
	s.cfg.Logf("restored checkpoint of step %d from %s%s in %s (the process's CPU %s): %s", m.Step, dir, how, time.Since(start).Round(time.Millisecond),
		time.Duration(processCPU()-cpu).Round(time.Millisecond), st.Describe())
	return nil
}

// restoreSize is the bytes ps task of numPS reads to restore m (the
// total of its progress): re-sharding, every file; else its own shard's
// file and the files of the other parts of the variables split onto it
// (read for their update counts).
func restoreSize(m checkpoint.Manifest, task, numPS int) int64 {
	read := map[int]bool{}
	if m.NumPS != numPS {
		for k := range m.Shards {
			read[k] = true
		}
	} else {
		read[task] = true
		for _, v := range m.Variables {
			mine := false
			for _, p := range v.Parts {
				mine = mine || p.Shard == task
			}
			for _, p := range v.Parts {
				read[p.Shard] = read[p.Shard] || mine
			}
		}
	}
	var n int64
	for k, sh := range m.Shards {
		if read[k] {
			n += sh.Size
		}
	}
	return n
}

// meter returns the progress of one read of checkpoint files: a line every
// ProgressEvery while it lasts (none for a quick one: the caller logs its
// own summary), every update told to the observer.
func (s *Server) meter(what string, total int64) *syncMeter {
	m := &progress.Meter{What: what, Total: total, Every: s.cfg.ProgressEvery, Now: s.cfg.Clock, Logf: s.cfg.Logf,
		Observe: s.cfg.Observer.RestoreProgress, QuietIfQuick: true}
	m.Start()
	return &syncMeter{m: m}
}

// syncMeter is a progress.Meter several goroutines may read files into.
type syncMeter struct {
	mu sync.Mutex // guards m
	m  *progress.Meter
}

func (s *syncMeter) add(n int64) {
	s.mu.Lock()
	s.m.Add(n)
	s.mu.Unlock()
}

func (s *syncMeter) done() {
	s.mu.Lock()
	s.m.Done()
	s.mu.Unlock()
}

// meteredFS counts the bytes read from checkpoint shard files into m.
type meteredFS struct {
	vfs.FS
	m *syncMeter
}

func (f meteredFS) Open(name string) (vfs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil || !strings.HasSuffix(name, ".safetensors") {
		return file, err
	}
	if _, ok := file.(interface{ Fd() uintptr }); ok {
		return meteredOSFile{meteredFile{file, f.m}}, nil
	}
	return meteredFile{file, f.m}, nil
}

// meteredOSFile is a meteredFile that a restore may map (it has the
// file's descriptor) and count as it reads the mapping.
type meteredOSFile struct{ meteredFile }

func (f meteredOSFile) Fd() uintptr { return f.File.(interface{ Fd() uintptr }).Fd() }

func (f meteredOSFile) ReadMapped(n int64) { f.m.add(n) }

type meteredFile struct {
	vfs.File
	m *syncMeter
}

func (f meteredFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	if n > 0 {
		f.m.add(int64(n))
	}
	return n, err
}
