package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/trainer"
)

// perfFlags are the training flags of issue 18 (training at the speed of
// compute): the standalone baseline and the overlap of communication with
// compute.
type perfFlags struct {
	standalone bool
	overlap    string
	cpuProfile string
}

func definePerfFlags(fs *flag.FlagSet) *perfFlags {
	f := &perfFlags{}
	fs.BoolVar(&f.standalone, "standalone", false, "train the model in this one process, on local variables and tables through the ps's own update code: no ps, no sockets, no cluster flags; the same output and --result_file (the baseline of the distributed figures; paramserv train only)")
	fs.StringVar(&f.overlap, "overlap", "auto", "asynchronous training: compute the next step while the last one's push and pull are in flight, the gradients one round of pushes staler: true, false, or auto (with one worker only; with --max_staleness only when it is at least 2*workers-1)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write this task's CPU profile (runtime/pprof, read with go tool pprof) to PREFIX.JOBINDEX, e.g. PREFIX.ps0 and PREFIX.worker0 (--standalone: PREFIX.worker0), from start to exit")
	return f
}

// startProfile starts the CPU profile --cpuprofile asks for, in a file
// named after task; the returned function stops it.
func (f *perfFlags) startProfile(task cluster.Task) (stop func(), err error) {
	if f.cpuProfile == "" {
		return func() {}, nil
	}
	stop, err = startCPUProfile(fmt.Sprintf("%s.%s%d", f.cpuProfile, task.Job, task.Index))
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return stop, nil
}

// apply puts the flags into a trainer configuration.
func (f *perfFlags) apply(cfg *trainer.Config) error {
	switch f.overlap {
	case "auto":
		cfg.Overlap = trainer.OverlapAuto
	case "true", "1":
		cfg.Overlap = trainer.OverlapOn
	case "false", "0":
		cfg.Overlap = trainer.OverlapOff
	default:
		return fmt.Errorf("--overlap=%q: want auto, true or false", f.overlap)
	}
	return nil
}

// clusterFlagNames are the flags that name a cluster, which --standalone
// has none of.
var clusterFlagNames = []string{"ps_hosts", "worker_hosts", "job_name", "task_index", "task_index_env", "replicas", "replica_hosts"}

// standaloneCluster checks that a --standalone command line names no
// cluster and gives it the stand-in one of a single worker (never
// dialled). It reports false, having written why, when the line is to fix.
func (f *trainFlags) standaloneCluster(stderr io.Writer) bool {
	for _, name := range clusterFlagNames {
		if f.set(name) {
			fmt.Fprintf(stderr, "paramserv train: --standalone trains in this process alone: drop --%s\n", name)
			return false
		}
	}
	f.cluster = func() cluster.Flags { return localProbeCluster(1, 1) }
	return true
}
