package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/paramserv/paramserv/internal/bench"
	"github.com/paramserv/paramserv/internal/optim"
)

// benchHiddenFlags are for profiling and for the baseline child process,
// not for users; the usage text leaves them out.
var benchHiddenFlags = map[string]bool{"cpuprofile": true, "baseline_server": true}

// benchFlags are the flags of `paramserv bench`, as parsed.
type benchFlags struct {
	fs                                       *flag.FlagSet
	numPS, numWorkers                        *int
	denseBytes, sparseKeys, dims, cases, ops *string
	reps, warmup                             *int
	asJSON                                   *bool
	memOps                                   *int
	memBytes, memKeys                        *string
	memDim, splitBytes                       *int
	baseline, baselineApply                  *bool
	seed                                     *uint64
	optimizer                                *string
	lr                                       *float64
	lrSchedule                               *string
	grpcOnly, keyCache, verbose              *bool
	auth, cpuProfile                         *string
	baselineServer                           *bool
}

// defineBenchFlags defines bench's flags on a new flag set.
func defineBenchFlags() *benchFlags {
	fs := flag.NewFlagSet("paramserv bench", flag.ContinueOnError)
	return &benchFlags{
		fs:             fs,
		numPS:          fs.Int("ps", 1, "number of ps processes"),
		numWorkers:     fs.Int("workers", 1, "number of workers: this process is worker 0, the others are goroutines in it with their own clients"),
		denseBytes:     fs.String("dense_bytes", "1M,16M,64M", "sizes of the dense case's variable, in bytes; K, M, G are binary (1M = 1048576)"),
		sparseKeys:     fs.String("sparse_keys", "100k,1M", "keys per sparse operation; k and M are decimal (100k = 100000, 1M = 1000000)"),
		dims:           fs.String("dim", "1,8", "row widths of the sparse case's table"),
		cases:          fs.String("cases", "tiny,dense,sparse", "cases to run: tiny, dense, sparse (may be empty with --mem_ops)"),
		ops:            fs.String("op", "push,pull,pushpull", "operations to measure: push, pull, pushpull"),
		reps:           fs.Int("reps", 0, "timed repetitions of each operation (default: tiny 500, otherwise 20)"),
		warmup:         fs.Int("warmup", -1, "untimed repetitions before the timed ones (default: tiny 50; large cases 2; otherwise 3)"),
		asJSON:         fs.Bool("json", false, "write one JSON object per case and operation instead of the table"),
		memOps:         fs.Int("mem_ops", 0, "if > 0, also run this many pushpulls of --mem_bytes dense and --mem_keys x --mem_dim sparse, and report the ps's RSS growth and this process's heap growth"),
		memBytes:       fs.String("mem_bytes", "64K", "dense size of the memory case"),
		memKeys:        fs.String("mem_keys", "1k", "sparse keys of the memory case"),
		memDim:         fs.Int("mem_dim", 8, "row width of the memory case's table"),
		splitBytes:     fs.Int("split_bytes", 0, "split dense variables larger than this across all ps (default: 1 with --ps > 1, so the dense variable is always split)"),
		baseline:       fs.Bool("baseline", true, "measure the plain TCP baseline (a child process) next to every operation"),
		baselineApply:  fs.Bool("baseline_apply", false, "the baseline server also applies each dense push's gradients to values of its own with sgd, as the ps must, whole between reading the request and writing the reply; the plain baseline only moves the bytes"),
		seed:           fs.Uint64("seed", 1, "seed of the sparse keys"),
		optimizer:      fs.String("optimizer", "sgd", "the update rule the ps apply (docs/OPTIMIZERS.md), with its defaults"),
		lr:             fs.Float64("learning_rate", 1, "the rule's learning rate"),
		lrSchedule:     fs.String("lr_schedule", "", "the rule's learning-rate schedule (docs/OPTIMIZERS.md; default constant)"),
		grpcOnly:       fs.Bool("grpc_only", false, "send pushes and pulls by gRPC instead of the data path, to compare the two"),
		keyCache:       fs.Bool("key_cache", true, "name a sparse key set sent in a recent call by its cache slot; false sends the keys in full every call, to compare with systems that cache no keys"),
		verbose:        fs.Bool("verbose", false, "show the ps processes' output"),
		auth:           fs.String("auth", "none", "the ps's authentication, a comma-separated list to compare, each case run with each in turn: none, tls (mutual TLS, certificates made for the run), token, tls+token"),
		cpuProfile:     fs.String("cpuprofile", "", "write this process's CPU profile here"),
		baselineServer: fs.Bool("baseline_server", false, "serve the TCP baseline until stdin ends (the baseline child process)"),
	}
}

// usage writes bench's help text.
func (f *benchFlags) usage(w io.Writer) {
	fmt.Fprint(w, `Usage: paramserv bench [flags]

Measures push, pull and pushpull of a tiny, a dense and a sparse case
against --ps ps processes of this binary on loopback (fresh ones for each
case; this process is worker 0), next to a plain TCP socket pair in a child
process moving the same bytes. Gradients are all 1 with sgd at learning rate
1, so after each case every value must be exactly minus the pushes sent; a
case that is not exits 1. Reports median, p90, min and max ms of worker 0,
GB/s (payload bytes / median; push N, pull N, pushpull 2N for N dense bytes;
GB = 1e9 bytes), keys/s, and the ratio to the baseline's median.
`)
	printFlags(w, f.fs, false, benchHiddenFlags)
}

// checkCounts checks the flags that take a count against their least value.
func (f *benchFlags) checkCounts() error {
	for _, c := range []struct {
		name     string
		v, least int
		zero     string // what 0 means, where it means something
	}{
		{"ps", *f.numPS, 1, ""}, {"workers", *f.numWorkers, 1, ""}, {"reps", *f.reps, 0, "the default"},
		{"warmup", *f.warmup, -1, "none; -1: the default"}, {"mem_ops", *f.memOps, 0, "no memory case"},
		{"mem_dim", *f.memDim, 1, ""}, {"split_bytes", *f.splitBytes, 0, "the default"},
	} {
		if c.v < c.least {
			if c.zero != "" {
				return fmt.Errorf("--%s=%d: want a number >= %d (0: %s)", c.name, c.v, c.least, c.zero)
			}
			return fmt.Errorf("--%s=%d: want a number >= %d", c.name, c.v, c.least)
		}
	}
	return nil
}

// workload parses the lists of cases, operations and sizes into the
// cases to run, each with its warm-up and timed repetitions, and the
// memory case's sizes.
func (f *benchFlags) workload() (list []bench.Case, ops []bench.Op, memBytes, memKeys int64, err error) {
	var kinds []bench.Kind
	if strings.TrimSpace(*f.cases) != "" || *f.memOps == 0 {
		if kinds, err = pickList(*f.cases, "--cases", bench.Tiny, bench.Dense, bench.Sparse); err != nil {
			return nil, nil, 0, 0, err
		}
	}
	if ops, err = pickList(*f.ops, "--op", bench.Ops...); err != nil {
		return nil, nil, 0, 0, err
	}
	sizes, err := bench.ParseList(*f.denseBytes, bench.ParseBytes)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("--dense_bytes: %w", err)
	}
	keys, err := bench.ParseList(*f.sparseKeys, bench.ParseKeys)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("--sparse_keys: %w", err)
	}
	dims, err := bench.ParseList(*f.dims, bench.ParseDim)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("--dim: %w", err)
	}
	if memBytes, err = bench.ParseBytes(*f.memBytes); err != nil {
		return nil, nil, 0, 0, fmt.Errorf("--mem_bytes: %w", err)
	}
	if memKeys, err = bench.ParseKeys(*f.memKeys); err != nil {
		return nil, nil, 0, 0, fmt.Errorf("--mem_keys: %w", err)
	}
	list = benchCases(kinds, sizes, keys, dims)
	for i := range list {
		w, r := bench.DefaultReps(list[i])
		if *f.reps > 0 {
			r = *f.reps
		}
		if *f.warmup >= 0 {
			w = *f.warmup
		}
		list[i].Warmup, list[i].Reps = w, r
	}
	return list, ops, memBytes, memKeys, nil
}

// benchCases lists the cases of each kind: the tiny one, a dense one per
// size, and a sparse one per key count and row width.
func benchCases(kinds []bench.Kind, sizes, keys, dims []int64) []bench.Case {
	var list []bench.Case
	for _, k := range kinds {
		switch k {
		case bench.Tiny:
			list = append(list, bench.Case{Kind: bench.Tiny, Bytes: 4})
		case bench.Dense:
			for _, n := range sizes {
				list = append(list, bench.Case{Kind: bench.Dense, Bytes: n})
			}
		case bench.Sparse:
			for _, n := range keys {
				for _, d := range dims {
					list = append(list, bench.Case{Kind: bench.Sparse, Keys: n, Dim: d})
				}
			}
		}
	}
	return list
}

// startCPUProfile starts the CPU profile --cpuprofile asks for; the
// returned function stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// Bench is `paramserv bench`: measure push, pull and pushpull against ps
// processes on loopback, next to a plain TCP baseline, and verify that every
// update was applied.
func Bench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := defineBenchFlags()
	if code, done := parseArgs(f.fs, args, stdout, stderr, f.usage); done {
		return code
	}
	if *f.baselineServer {
		if err := bench.RunBaselineServer(os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "paramserv bench --baseline_server: %v\n", err)
			return 1
		}
		return 0
	}
	bad := func(err error) int {
		// The bench package's errors start "bench: ", which this line
		// already says.
		msg := strings.ReplaceAll(err.Error(), ": bench: ", ": ")
		fmt.Fprintf(stderr, "paramserv bench: %s\n", msg)
		return 2
	}
	if code, extra := extraArg(f.fs, stderr); extra {
		return code
	}
	if err := f.checkCounts(); err != nil {
		return bad(err)
	}
	list, ops, memBytes, memKeys, err := f.workload()
	if err != nil {
		return bad(err)
	}

	logf := newLogger(stderr)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "paramserv bench: cannot find this binary to start the ps: %v\n", err)
		return 1
	}
	stopProfile, err := startCPUProfile(*f.cpuProfile)
	if err != nil {
		return bad(fmt.Errorf("--cpuprofile: %w", err))
	}
	defer stopProfile()
	var psLog io.Writer
	if *f.verbose {
		psLog = stderr
	}
	cfg := bench.Config{
		SessionConfig: bench.SessionConfig{
			NumPS: *f.numPS, NumWorkers: *f.numWorkers, SplitBytes: *f.splitBytes,
			Start: bench.ProcessStarter(exe, psLog), Seed: *f.seed, Logf: logf, GRPCOnly: *f.grpcOnly, NoKeyCache: !*f.keyCache,
			Optimizer: optim.Config{Name: *f.optimizer, LearningRate: *f.lr, Schedule: *f.lrSchedule},
		},
		Cases: list, Ops: ops,
		MemOps: *f.memOps, MemBytes: memBytes, MemKeys: memKeys, MemDim: int64(*f.memDim),
		BaselineApply: *f.baselineApply,
	}
	if _, err := optim.New(cfg.Optimizer); err != nil {
		return bad(fmt.Errorf("--optimizer: %w", err))
	}
	modes, err := benchAuthModes(*f.auth)
	if err != nil {
		return bad(err)
	}
	if len(modes) > 1 || modes[0] != "none" {
		return benchAuth(ctx, cfg, modes, *f.baseline, *f.asJSON, exe, psLog, stdout, logf)
	}
	return runBench(ctx, cfg, *f.baseline, *f.asJSON, exe, stdout, logf)
}

// runBench runs the cases with no authentication, next to the TCP
// baseline in a child process where baseline is set, and writes the
// results as a table or, with asJSON, as JSON lines.
func runBench(ctx context.Context, cfg bench.Config, baseline, asJSON bool, exe string, stdout io.Writer, logf func(string, ...any)) int {
	if baseline {
		bp, err := bench.StartBaselineProcess(ctx, exe, "bench", "--baseline_server")
		if err != nil {
			logf("%v", err)
			return 1
		}
		defer bp.Close()
		cfg.BaselineAddr, cfg.BaselinePID = bp.Addr, bp.PID()
		logf("baseline server (child process) at %s", bp.Addr)
	}
	if asJSON {
		cfg.Emit = func(r bench.Result) { _ = bench.WriteJSON(stdout, r) }
	}
	results, err := bench.Run(ctx, cfg)
	if !asJSON {
		_ = bench.WriteTable(stdout, results)
	}
	if err != nil {
		logf("failed: %v", err)
		return 1
	}
	return 0
}

// pickList parses a comma-separated list of names, each one of allowed.
func pickList[T ~string](s, flagName string, allowed ...T) ([]T, error) {
	var out []T
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		found := false
		for _, a := range allowed {
			if string(a) == item {
				out, found = append(out, a), true
			}
		}
		if !found {
			names := make([]string, len(allowed))
			for i, a := range allowed {
				names[i] = string(a)
			}
			return nil, fmt.Errorf("%s: unknown %q (want a comma-separated list of %s)", flagName, item, strings.Join(names, ", "))
		}
	}
	return out, nil
}
