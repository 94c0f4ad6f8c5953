package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// Config is a whole bench run.
type Config struct {
	SessionConfig
	Cases []Case
	Ops   []Op
	// BaselineAddr is a baseline server (ServeBaseline); "" skips the
	// baseline. BaselinePID is its process, if it has one of its own (0
	// otherwise), for the CPU comparison.
	BaselineAddr string
	BaselinePID  int
	// BaselineApply makes the baseline server apply each dense push's
	// gradients to values of its own as sgd does before it answers (see
	// DialBaseline): the same work as the ps, where the plain baseline
	// only moves the bytes. Sparse cases' baselines only move bytes.
	BaselineApply bool
	// MemOps > 0 adds the memory case: that many timed pushpulls (and a
	// tenth as many warm-up ones) of a dense variable of MemBytes and
	// MemKeys keys of a table of width MemDim.
	MemOps                    int
	MemBytes, MemKeys, MemDim int64
	// PhaseTimeout bounds each phase (warm-up, timed) of one operation
	// (10 minutes if 0).
	PhaseTimeout time.Duration
	// Emit receives each result as soon as its case is done.
	Emit func(Result)
}

// Result is the measurement of one operation of one case. Times are of
// worker 0; rates are defined in the package doc.
type Result struct {
	Case         string `json:"case"`
	Auth         string `json:"auth,omitempty"` // the ps's authentication, when compared (paramserv bench --auth)
	Op           string `json:"op"`
	Bytes        int64  `json:"bytes"` // dense: the variable's size; sparse: the touched rows' values, keys·dim·4
	Keys         int64  `json:"keys"`
	Dim          int64  `json:"dim"`
	PayloadBytes int64  `json:"payload_bytes"`
	Parts        int    `json:"parts,omitempty"` // pieces the dense variable is split into
	Warmup       int    `json:"warmup"`
	Reps         int    `json:"reps"`

	MedianMS   float64 `json:"median_ms"`
	P90MS      float64 `json:"p90_ms"`
	MinMS      float64 `json:"min_ms"`
	MaxMS      float64 `json:"max_ms"`
	GBPerS     float64 `json:"gb_per_s"`
	KeysPerS   float64 `json:"keys_per_s"`
	AggGBPerS  float64 `json:"agg_gb_per_s"`  // every worker's timed payload over the timed phase's wall time
	AggOpsPerS float64 `json:"agg_ops_per_s"` // every worker's timed operations over the same time

	BaselineApplies  bool    `json:"baseline_applies,omitempty"` // the baseline server applied the gradients (Config.BaselineApply)
	BaselineMedianMS float64 `json:"baseline_median_ms"`
	BaselineP90MS    float64 `json:"baseline_p90_ms"`
	RatioToBaseline  float64 `json:"ratio_to_baseline"`

	// CPU time per operation of the ps (all of them) and of the baseline
	// server, and their ratio: less moved by a noisy machine than times
	// are. Only with one worker, the ps and the baseline server in
	// processes of their own.
	PSCPUMSPerOp       float64 `json:"ps_cpu_ms_per_op,omitempty"`
	BaselineCPUMSPerOp float64 `json:"baseline_cpu_ms_per_op,omitempty"`
	CPURatioToBaseline float64 `json:"cpu_ratio_to_baseline,omitempty"`

	Verified bool   `json:"verified"`
	Pushes   int64  `json:"pushes"` // pushes sent in the case, all operations and workers
	Error    string `json:"error,omitempty"`
	PS       int    `json:"ps"`
	Workers  int    `json:"workers"`

	PSRSSMB     float64 `json:"ps_rss_mb,omitempty"`      // largest ps VmRSS at the end of the case
	PSPeakRSSMB float64 `json:"ps_peak_rss_mb,omitempty"` // largest ps VmHWM

	*MemReport
}

// MemReport is the memory case's extra findings. Before is the end of the
// warm-up, after the end of the timed operations; heap figures are after a
// garbage collection.
type MemReport struct {
	Ops               int     `json:"mem_ops"`
	PSRSSBeforeKB     []int64 `json:"ps_rss_before_kb"`
	PSRSSAfterKB      []int64 `json:"ps_rss_after_kb"`
	PSRSSGrowthKB     []int64 `json:"ps_rss_growth_kb"`
	BenchHeapBeforeKB int64   `json:"bench_heap_before_kb"`
	BenchHeapAfterKB  int64   `json:"bench_heap_after_kb"`
	BenchHeapGrowthKB int64   `json:"bench_heap_growth_kb"`
	BenchRSSBeforeKB  int64   `json:"bench_rss_before_kb"`
	BenchRSSAfterKB   int64   `json:"bench_rss_after_kb"`
	BenchAllocPerOp   int64   `json:"bench_alloc_bytes_per_op"`
	BenchMallocsPerOp int64   `json:"bench_mallocs_per_op"`
}

// Run measures every case, then the memory case, emitting each result. A
// case that fails verification is reported (Verified false) and the run
// goes on; its error, wrapping ErrNotVerified, is returned at the end. Any
// other failure ends the run.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Emit == nil {
		cfg.Emit = func(Result) {}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.PhaseTimeout <= 0 {
		cfg.PhaseTimeout = 10 * time.Minute
	}
	var all []Result
	var failed []error
	cases := cfg.Cases
	if cfg.MemOps > 0 {
		cases = append(cases[:len(cases):len(cases)], Case{Kind: Mem, Bytes: cfg.MemBytes, Keys: cfg.MemKeys, Dim: cfg.MemDim, Warmup: max(1, cfg.MemOps/10), Reps: cfg.MemOps})
	}
	for _, c := range cases {
		rs, err := runCase(ctx, cfg, c)
		for _, r := range rs {
			cfg.Emit(r)
		}
		all = append(all, rs...)
		if errors.Is(err, ErrNotVerified) {
			cfg.Logf("%s: NOT VERIFIED: %v", c, err)
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return all, err
		}
	}
	return all, errors.Join(failed...)
}

func runCase(ctx context.Context, cfg Config, c Case) ([]Result, error) {
	if c.Reps == 0 {
		c.Warmup, c.Reps = DefaultReps(c)
	}
	ops := cfg.Ops
	if c.Kind == Mem {
		ops = []Op{PushPull}
	}
	cfg.Logf("%s: starting %d ps, %d workers; %d warm-up and %d timed repetitions of %v", c, cfg.NumPS, cfg.NumWorkers, c.Warmup, c.Reps, ops)
	s, err := Open(ctx, cfg.SessionConfig, c)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", c, err)
	}
	var results []Result
	for _, op := range ops {
		r, err := measure(ctx, cfg, s, op)
		if err != nil {
			err = s.explain(err)
			s.abort()
			return nil, err
		}
		cfg.Logf("%s %s: median %.3f ms, baseline %.3f ms", c, op, r.MedianMS, r.BaselineMedianMS)
		results = append(results, r)
	}
	verr := s.Verify(ctx)
	if verr != nil && !errors.Is(verr, ErrNotVerified) {
		s.abort()
		return nil, verr
	}
	var rss, peak int64
	for _, m := range s.Mem() {
		rss, peak = max(rss, m.RSS), max(peak, m.PeakRSS)
	}
	if err := s.Close(ctx); err != nil {
		return nil, fmt.Errorf("bench: %s: stopping: %w", c, err)
	}
	for i := range results {
		r := &results[i]
		r.Verified = verr == nil
		if verr != nil {
			r.Error = verr.Error()
		}
		r.Pushes = s.Pushes()
		r.PSRSSMB, r.PSPeakRSSMB = float64(rss)/(1<<20), float64(peak)/(1<<20)
	}
	return results, verr
}

// measure runs op on every worker: the warm-up, a barrier, the timed
// repetitions, a barrier; then the baseline of the same shape. With one
// worker the baseline's round trips are interleaved with the operations
// instead (measureInterleaved).
func measure(ctx context.Context, cfg Config, s *Session, op Op) (Result, error) {
	c := s.Case
	single := s.NumWorkers == 1 && op != Push
	if s.NumWorkers == 1 && cfg.BaselineAddr != "" && c.Kind != Mem {
		return measureInterleaved(ctx, cfg, s, op)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	phase := func(name string) (context.Context, context.CancelFunc) {
		return context.WithTimeoutCause(ctx, cfg.PhaseTimeout,
			fmt.Errorf("bench: %s %s: the %s did not finish within %s", c, op, name, cfg.PhaseTimeout))
	}
	var warm, timed sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, s.NumWorkers)
	ends := make([]time.Time, s.NumWorkers)
	var ds []time.Duration
	for i := range s.NumWorkers {
		warm.Add(1)
		timed.Add(1)
		go func() {
			defer timed.Done()
			wctx, wcancel := phase("warm-up")
			err := repeat(wctx, s, i, op, c.Warmup, nil, single)
			wcancel()
			warm.Done()
			if err != nil {
				errs[i] = err
				cancel(err)
				return
			}
			select {
			case <-start:
			case <-ctx.Done():
				return
			}
			var mine []time.Duration
			if i == 0 {
				mine = make([]time.Duration, 0, c.Reps)
			}
			tctx, tcancel := phase("timed repetitions")
			err = repeat(tctx, s, i, op, c.Reps, &mine, single)
			tcancel()
			ends[i] = time.Now()
			if err != nil {
				errs[i] = err
				cancel(err)
			}
			if i == 0 {
				ds = mine
			}
		}()
	}
	warm.Wait()
	var mr *MemReport
	var before memPoint
	if c.Kind == Mem && ctx.Err() == nil {
		before = readMem(s)
	}
	t0 := time.Now()
	close(start)
	timed.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	if c.Kind == Mem {
		after := readMem(s)
		mr = before.report(after, c.Reps, s.NumWorkers)
	}
	var end time.Time
	for _, e := range ends {
		if e.After(end) {
			end = e
		}
	}
	r := newResult(s, op, ds, end.Sub(t0))
	r.MemReport = mr
	if cfg.BaselineAddr != "" {
		request, reply, _ := c.Shape(op)
		bctx, bcancel := phase("baseline")
		bds, err := MeasureBaseline(bctx, cfg.BaselineAddr, request, reply, cfg.baselineApplies(c), c.Warmup, c.Reps)
		bcancel()
		if err != nil {
			return Result{}, fmt.Errorf("bench: %s %s baseline: %w", c, op, err)
		}
		r.setBaseline(bds)
		r.BaselineApplies = cfg.baselineApplies(c)
	}
	return r, nil
}

// measureInterleaved measures op of the only worker and the baseline
// round trip of the same shape in turns, one of each per repetition (the
// baseline first in every other one), so that both see the same moments of
// a shared, noisy machine and their ratio does not depend on which ran in
// a quiet spell.
func measureInterleaved(ctx context.Context, cfg Config, s *Session, op Op) (Result, error) {
	c := s.Case
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.PhaseTimeout,
		fmt.Errorf("bench: %s %s: the operations and baseline round trips did not finish within %s", c, op, cfg.PhaseTimeout))
	defer cancel()
	request, reply, _ := c.Shape(op)
	b, err := DialBaseline(ctx, cfg.BaselineAddr, request, reply, cfg.baselineApplies(c))
	if err != nil {
		return Result{}, fmt.Errorf("bench: %s %s baseline: %w", c, op, err)
	}
	defer b.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = b.conn.SetDeadline(dl)
	}
	check := op != Push
	ds := make([]time.Duration, 0, c.Reps)
	bds := make([]time.Duration, 0, c.Reps)
	var busy time.Duration // the operations' own time, for the aggregate rates
	var cpu0 cpuPoint
	for i := range c.Warmup + c.Reps {
		timed := i >= c.Warmup
		if i == c.Warmup {
			cpu0 = readCPU(s, cfg.BaselinePID)
		}
		for turn := range 2 {
			if (turn == 0) == (i%2 == 0) {
				t0 := time.Now()
				if err := s.Do(ctx, 0, op); err != nil {
					return Result{}, err
				}
				if d := time.Since(t0); timed {
					ds = append(ds, d)
					busy += d
				}
				if check {
					if err := s.CheckLast(); err != nil {
						return Result{}, err
					}
				}
				continue
			}
			t0 := time.Now()
			if err := b.RoundTrip(); err != nil {
				return Result{}, fmt.Errorf("bench: %s %s baseline: %w", c, op, err)
			}
			if d := time.Since(t0); timed {
				bds = append(bds, d)
			}
		}
	}
	cpu1 := readCPU(s, cfg.BaselinePID)
	r := newResult(s, op, ds, busy)
	r.setBaseline(bds)
	r.BaselineApplies = cfg.baselineApplies(c)
	if cpu0.ok && cpu1.ok && c.Reps > 0 {
		r.PSCPUMSPerOp = ms(cpu1.ps-cpu0.ps) / float64(c.Reps)
		r.BaselineCPUMSPerOp = ms(cpu1.baseline-cpu0.baseline) / float64(c.Reps)
		if r.BaselineCPUMSPerOp > 0 {
			r.CPURatioToBaseline = r.PSCPUMSPerOp / r.BaselineCPUMSPerOp
		}
	}
	return r, nil
}

// cpuPoint is the CPU time used so far by every ps and by the baseline
// server; ok is false where one cannot be measured.
type cpuPoint struct {
	ps, baseline time.Duration
	ok           bool
}

func readCPU(s *Session, baselinePID int) cpuPoint {
	if baselinePID == 0 {
		return cpuPoint{}
	}
	b, err := ReadProcCPU(baselinePID)
	if err != nil {
		return cpuPoint{}
	}
	p := cpuPoint{baseline: b, ok: true}
	for i := range s.cl.Addrs() {
		d, ok := s.cl.CPU(i)
		if !ok {
			return cpuPoint{}
		}
		p.ps += d
	}
	return p
}

// newResult summarises worker 0's timed repetitions ds of op; wall is the
// time in which all workers did theirs.
func newResult(s *Session, op Op, ds []time.Duration, wall time.Duration) Result {
	c := s.Case
	_, _, payload := c.Shape(op)
	sum := Summarize(ds)
	r := Result{
		Case: string(c.Kind), Op: string(op), Bytes: c.Bytes, Keys: c.Keys, Dim: c.Dim, PayloadBytes: payload, Parts: s.Parts,
		Warmup: c.Warmup, Reps: c.Reps,
		MedianMS: ms(sum.Median), P90MS: ms(sum.P90), MinMS: ms(sum.Min), MaxMS: ms(sum.Max),
		GBPerS:     perSecond(float64(payload), sum.Median) / 1e9,
		AggGBPerS:  perSecond(float64(payload)*float64(c.Reps*s.NumWorkers), wall) / 1e9,
		AggOpsPerS: perSecond(float64(c.Reps*s.NumWorkers), wall),
		PS:         len(s.cl.Addrs()), Workers: s.NumWorkers,
	}
	switch c.Kind {
	case Tiny:
		r.Bytes = 4
	case Sparse:
		r.Bytes = 4 * c.Keys * c.Dim
	}
	if c.hasSparse() {
		r.KeysPerS = perSecond(float64(c.Keys), sum.Median)
	}
	return r
}

// setBaseline records the baseline's round trips bds and the ratio.
func (r *Result) setBaseline(bds []time.Duration) {
	b := Summarize(bds)
	r.BaselineMedianMS, r.BaselineP90MS = ms(b.Median), ms(b.P90)
	if b.Median > 0 {
		r.RatioToBaseline = r.MedianMS / ms(b.Median)
	}
}

// repeat runs n operations of worker i, appending each duration to ds when
// it is not nil; with check, worker 0 spot-checks every pull (outside the
// timing).
func repeat(ctx context.Context, s *Session, i int, op Op, n int, ds *[]time.Duration, check bool) error {
	for range n {
		t0 := time.Now()
		if err := s.Do(ctx, i, op); err != nil {
			return err
		}
		if ds != nil {
			*ds = append(*ds, time.Since(t0))
		}
		if check && i == 0 {
			if err := s.CheckLast(); err != nil {
				return err
			}
		}
	}
	return nil
}

// memPoint is the memory at one moment of the memory case.
type memPoint struct {
	ps             []ProcMem
	heap, rss      int64
	alloc, mallocs uint64
}

func readMem(s *Session) memPoint {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p := memPoint{ps: s.Mem(), heap: int64(ms.HeapAlloc), alloc: ms.TotalAlloc, mallocs: ms.Mallocs}
	if m, err := ReadProcMem(os.Getpid()); err == nil {
		p.rss = m.RSS
	}
	return p
}

func (b memPoint) report(a memPoint, reps, workers int) *MemReport {
	ops := uint64(max(1, reps*workers))
	r := &MemReport{
		Ops:               reps,
		BenchHeapBeforeKB: b.heap >> 10, BenchHeapAfterKB: a.heap >> 10, BenchHeapGrowthKB: (a.heap - b.heap) >> 10,
		BenchRSSBeforeKB: b.rss >> 10, BenchRSSAfterKB: a.rss >> 10,
		BenchAllocPerOp:   int64((a.alloc - b.alloc) / ops),
		BenchMallocsPerOp: int64((a.mallocs - b.mallocs) / ops),
	}
	for i := range min(len(a.ps), len(b.ps)) {
		r.PSRSSBeforeKB = append(r.PSRSSBeforeKB, b.ps[i].RSS>>10)
		r.PSRSSAfterKB = append(r.PSRSSAfterKB, a.ps[i].RSS>>10)
		r.PSRSSGrowthKB = append(r.PSRSSGrowthKB, (a.ps[i].RSS-b.ps[i].RSS)>>10)
	}
	return r
}

// baselineApplies reports whether case c's baseline applies gradients:
// with BaselineApply, for the dense cases (tiny included), whose requests
// are the gradients alone.
func (cfg *Config) baselineApplies(c Case) bool {
	return cfg.BaselineApply && (c.Kind == Dense || c.Kind == Tiny)
}
