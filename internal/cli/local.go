package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/models/sparselr"
)

// Local is `paramserv local`: a whole cluster on this machine, as separate
// processes, with the training flags passed on to every task.
func Local(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	numPS := fs.Int("ps", 1, "number of ps processes")
	numWorkers := fs.Int("workers", 2, "number of worker processes")
	restartPS := fs.Bool("restart_ps", true, "restart a ps that exits unexpectedly (it restores the latest checkpoint of --checkpoint_dir)")
	restartWorkers := fs.Bool("restart_workers", true, "restart a worker killed by a signal (it rejoins the job)")
	maxRestarts := fs.Int("max_restarts", 3, "restart each process at most this many times (0: never)")
	f := defineTrainFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: paramserv local [--ps=N] [--workers=N] [training flags]
       paramserv local [--ps=N] [--workers=N] [flags] -- CMD [ARGS...]

Starts a whole cluster on this machine: --ps ps processes and --workers
worker processes of this binary, on free loopback ports, and waits for them.

With -- CMD ARGS, each worker is your own training program instead: CMD
runs once per worker with TF_CONFIG set to the cluster and its task,
{"cluster":{"ps":[...],"worker":[...]},"task":{"type":"worker","index":I}},
as Kubernetes' TFJob operator sets it; the ps are this binary, given the
flags before --. Output is prefixed as below, a worker killed by a signal
is restarted, and the exit status is the workers'. Once every worker has
exited 0, ps still waiting for workers that never said they were done are
stopped after 5s.

Every training flag is passed on to each task (--result_file to the chief
only); the cluster flags are chosen here. Each output line is prefixed with
its process ([ps0], [worker1]). Exits 0 only if every process does; on a
failure or Ctrl-C it stops them all and says which failed and why, and
exits 2 if a process exited 2 (input to fix: a flag, a malformed data
line), otherwise 1.

A ps that exits unexpectedly, other than with exit status 2, is restarted
(--restart_ps); a worker is restarted (--restart_workers) only when a
signal ended it: SIGKILL, or a SIGTERM or SIGINT sent from outside, after
which a paramserv task that had not finished exits 143 or 130 (128 + the
signal). Each at most --max_restarts times. The SIGTERM this command sends
its own processes when it stops them all never restarts one.

Flags:
`)
		fs.PrintDefaults()
	}
	var workerCmd []string
	for i, a := range args {
		if a == "--" {
			args, workerCmd = args[:i], args[i+1:]
			if len(workerCmd) == 0 {
				fmt.Fprintf(stderr, "paramserv local: nothing after --: want the command each worker runs, as in paramserv local -- python3 train.py\n")
				return 2
			}
			break
		}
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	for _, c := range []struct {
		name     string
		v, least int
	}{{"ps", *numPS, 1}, {"workers", *numWorkers, 1}, {"max_restarts", *maxRestarts, 0}} {
		if c.v < c.least {
			fmt.Fprintf(stderr, "paramserv local: --%s=%d: want a number >= %d\n", c.name, c.v, c.least)
			return 2
		}
	}
	if *maxRestarts == 0 {
		*restartPS, *restartWorkers = false, false
	}
	var pass, chief []string
	var clusterFlag string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "ps", "workers", "restart_ps", "restart_workers", "max_restarts":
		case "ps_hosts", "worker_hosts", "job_name", "task_index", "replica_hosts":
			clusterFlag = fl.Name
		case "result_file":
			chief = append(chief, "--result_file="+fl.Value.String())
		default:
			pass = append(pass, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if clusterFlag != "" {
		fmt.Fprintf(stderr, "paramserv local: --%s is chosen by paramserv local itself; use --ps and --workers\n", clusterFlag)
		return 2
	}
	// Check the training flags here, once, rather than in every child.
	logf := newLogger(stderr)
	probe := *f
	probe.cluster = func() clusterFlagsT { return localProbeCluster(*numPS, *numWorkers) }
	if _, err := probe.config("", func(string, ...any) {}); err != nil {
		fmt.Fprintf(stderr, "paramserv local: %v\n", err)
		return 2
	}
	// Every task runs on this machine: a training list that holds the
	// test file is refused once, here, rather than by every worker.
	if f.model == "sparse_lr" && f.trainData != "" && f.testData != "" {
		if err := sparselr.CheckDisjoint(f.trainData, f.testData, f.dataDir); err != nil {
			fmt.Fprintf(stderr, "paramserv local: %v\n", err)
			return 2
		}
	}
	if f.checkpointDir != "" {
		if err := checkCheckpointDir(f.checkpointDir); err != nil {
			fmt.Fprintf(stderr, "paramserv local: %v\n", err)
			return 2
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "paramserv local: cannot find this binary to start the tasks: %v\n", err)
		return 1
	}
	if len(workerCmd) > 0 {
		if _, err := exec.LookPath(workerCmd[0]); err != nil {
			fmt.Fprintf(stderr, "paramserv local: the workers' command %q: %v\n", workerCmd[0], err)
			return 2
		}
		if len(chief) > 0 {
			fmt.Fprintf(stderr, "paramserv local: --result_file is for the built-in models; with -- CMD give your program its own\n")
			return 2
		}
	}
	var psExit time.Duration // the default
	if len(workerCmd) > 0 {
		psExit = 5 * time.Second // a program that does not call done
	}
	err = local.Run(ctx, local.Config{
		NumPS: *numPS, NumWorkers: *numWorkers, PSExitTimeout: psExit,
		Exe: exe, Subcommand: "train", Args: pass, ChiefArgs: chief, WorkerCmd: workerCmd,
		Out: stdout, Logf: logf,
		RestartPS: *restartPS, RestartWorkers: *restartWorkers, MaxRestarts: *maxRestarts,
		Replicas: f.rep.replicas,
	})
	if err != nil {
		logf("%v", err)
		var f *local.Failure
		if errors.As(err, &f) && f.InputToFix {
			return 2
		}
		return 1
	}
	logf("all %d processes exited 0", *numPS+*numWorkers)
	return 0
}
