package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/local"
	"github.com/paramserv/paramserv/internal/models/sparselr"
	"github.com/paramserv/paramserv/internal/version"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// localHidden are train's flags that local chooses itself: its help leaves
// them out (given, they are refused naming --ps and --workers).
var localHidden = map[string]bool{"ps_hosts": true, "worker_hosts": true, "job_name": true, "task_index": true, "task_index_env": true}

// localUsage is the head of `paramserv local --help`; the flags follow.
const localUsage = `Usage: paramserv local [--ps=N] [--workers=N] [training flags]
       paramserv local [--ps=N] [--workers=N] [flags] -- CMD [ARGS...]

Starts a whole cluster on this machine: --ps ps processes and --workers
worker processes of this binary, on free loopback ports, and waits for them.
More processes than this machine can hold (3 open files each under ulimit
-n; every host:port in one 128 KiB argument) are refused at start.

With -- CMD ARGS, each worker is your own training program instead: CMD
runs once per worker with TF_CONFIG set to the cluster and its task,
{"cluster":{"ps":[...],"worker":[...]},"task":{"type":"worker","index":I}},
as Kubernetes' TFJob operator sets it; the ps are this binary, given the
flags before --. Output is prefixed as below, a worker killed by a signal
is restarted, and the exit status is the workers'. Once every worker has
exited 0, ps still waiting for workers that never said they were done are
stopped after 5s.

Every training flag is passed on to each task (--result_file to the chief
only); the cluster flags are chosen here. With -- CMD, --tls_dir,
--tls_cert, --tls_key, --tls_ca and --auth_token_file reach each worker as
PARAMSERV_TLS_DIR, PARAMSERV_TLS_CERT, PARAMSERV_TLS_KEY, PARAMSERV_TLS_CA
and PARAMSERV_AUTH_TOKEN_FILE, and --checkpoint_dir, --summary_dir (default:
the checkpoint dir), --save_steps, --save_model_secs and
--save_summaries_steps as PARAMSERV_CHECKPOINT_DIR, PARAMSERV_SUMMARY_DIR,
PARAMSERV_SAVE_STEPS, PARAMSERV_SAVE_SECS and
PARAMSERV_SAVE_SUMMARIES_STEPS. The Python binding and paramserv.Start
(all but PARAMSERV_SAVE_SECS) read them where the program names none, so
the chief saves there and writes the losses the program reports as
TensorBoard summaries. Each output line is prefixed with its process
([ps0], [worker1]). Exits 0 only if every process does; on a
failure or Ctrl-C it stops them all and says which failed and why, and
exits 2 if a process exited 2 (input to fix: a flag, a malformed data
line), otherwise 1.

A ps that exits unexpectedly, other than with exit status 2, is restarted
(--restart_ps); a worker is restarted (--restart_workers) only when a
signal ended it: SIGKILL, or a SIGTERM or SIGINT sent from outside, after
which a paramserv task that had not finished exits 143 or 130 (128 + the
signal). Each at most --max_restarts times. The SIGTERM this command sends
its own processes when it stops them all never restarts one. Once every
worker has exited 0, a ps that was restarted is stopped at once (it cannot
have heard the workers that were done before it started): it exits 0 if it
restored the job's final checkpoint, and the job succeeds. A ps not
restarted has 30s to exit by itself, then is stopped and judged the same way.
`

// localFlags are local's own flags, beside train's that it passes on.
type localFlags struct {
	numPS, numWorkers, maxRestarts int
	restartPS, restartWorkers      bool
	train                          *trainFlags
}

func defineLocalFlags(fs *flag.FlagSet) *localFlags {
	l := &localFlags{}
	fs.IntVar(&l.numPS, "ps", 1, "number of ps processes")
	fs.IntVar(&l.numWorkers, "workers", 2, "number of worker processes")
	fs.BoolVar(&l.restartPS, "restart_ps", true, "restart a ps that exits unexpectedly (it restores the latest checkpoint of --checkpoint_dir)")
	fs.BoolVar(&l.restartWorkers, "restart_workers", true, "restart a worker killed by a signal (it rejoins the job)")
	fs.IntVar(&l.maxRestarts, "max_restarts", 3, "restart each process at most this many times (0: never)")
	l.train = defineTrainFlags(fs)
	return l
}

// Local is `paramserv local`: a whole cluster on this machine, as separate
// processes, with the training flags passed on to every task.
func Local(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("paramserv local", flag.ContinueOnError)
	l := defineLocalFlags(fs)
	help := func(w io.Writer) {
		fmt.Fprint(w, localUsage)
		printFlags(w, fs, true, localHidden)
	}
	args, workerCmd, ok := splitWorkerCmd(args)
	if !ok {
		fmt.Fprintf(stderr, "paramserv local: nothing after --: want the command each worker runs, as in paramserv local -- python3 train.py\n")
		return 2
	}
	if code, done := parseArgs(fs, args, stdout, stderr, help); done {
		return code
	}
	if code, bad := extraArg(fs, stderr); bad {
		return code
	}
	job, code := l.prepare(fs, workerCmd, stderr)
	if job == nil {
		return code
	}
	return job.run(ctx, stdout, stderr)
}

// splitWorkerCmd splits args at the first --: local's flags before it, the
// workers' own command after; false if nothing follows the --.
func splitWorkerCmd(args []string) (flags, workerCmd []string, ok bool) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:], len(args) > i+1
		}
	}
	return args, nil, true
}

// localJob is what local starts once its flags are checked.
type localJob struct {
	*localFlags
	workerCmd   []string
	pass, chief []string // the flags every task gets, and the chief besides
	progressOn  bool     // telemetry flags given: show progress
	trainSteps  int64    // the job's goal, as the tasks will read it
	exe         string   // this binary, that the tasks run
}

// prepare checks local's flags and the training flags, once, rather than
// in every child, and says what to start: nil and the exit status, said
// on stderr, if something is wrong.
func (l *localFlags) prepare(fs *flag.FlagSet, workerCmd []string, stderr io.Writer) (*localJob, int) {
	bad := func(err error) (*localJob, int) {
		fmt.Fprintf(stderr, "paramserv local: %v\n", err)
		return nil, 2
	}
	f := l.train
	if err := l.checkCounts(); err != nil {
		return bad(err)
	}
	if l.maxRestarts == 0 {
		l.restartPS, l.restartWorkers = false, false
	}
	job := &localJob{localFlags: l, workerCmd: workerCmd}
	var clusterFlag string
	job.pass, job.chief, clusterFlag = localPassedFlags(fs)
	telemetryArgs, err := f.telemetry.localArgs(f.set("metrics_addr"), l.numPS+l.numWorkers)
	if err != nil {
		return bad(err)
	}
	job.pass = append(job.pass, telemetryArgs...)
	job.progressOn = len(telemetryArgs) > 0 || f.telemetry.metricsAddr != ""
	if clusterFlag != "" {
		return bad(fmt.Errorf("--%s is chosen by paramserv local itself; use --ps and --workers", clusterFlag))
	}
	if job.trainSteps, err = l.checkTraining(len(workerCmd) > 0); err != nil {
		return bad(err)
	}
	if job.exe, err = os.Executable(); err != nil {
		fmt.Fprintf(stderr, "paramserv local: cannot find this binary to start the tasks: %v\n", err)
		return nil, 1
	}
	if err := job.checkWorkerCmd(); err != nil {
		return bad(err)
	}
	return job, 0
}

// checkCounts refuses a cluster local does not start: --standalone, too
// few processes, or more than this machine holds.
func (l *localFlags) checkCounts() error {
	if l.train.perf.standalone {
		return fmt.Errorf("--standalone is a job of one process: run it as paramserv train --standalone")
	}
	for _, c := range []struct {
		name     string
		v, least int
	}{{"ps", l.numPS, 1}, {"workers", l.numWorkers, 1}, {"max_restarts", l.maxRestarts, 0}} {
		if c.v < c.least {
			return fmt.Errorf("--%s=%d: want a number >= %d", c.name, c.v, c.least)
		}
	}
	if most, why := maxLocalTasks(); l.numPS+l.numWorkers > most {
		return fmt.Errorf("--ps=%d --workers=%d: %d processes, want at most %d on this machine (%s)",
			l.numPS, l.numWorkers, l.numPS+l.numWorkers, most, why)
	}
	return nil
}

// localPassedFlags sorts the flags given on fs: those passed on to every
// task, those to the chief only, and a cluster flag local chooses itself
// ("" if none was given).
func localPassedFlags(fs *flag.FlagSet) (pass, chief []string, clusterFlag string) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "ps", "workers", "restart_ps", "restart_workers", "max_restarts":
		case "ps_hosts", "worker_hosts", "job_name", "task_index", "task_index_env", "replica_hosts":
			clusterFlag = fl.Name
		case "result_file":
			chief = append(chief, "--result_file="+fl.Value.String())
		default:
			pass = append(pass, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	return pass, chief, clusterFlag
}

// checkTraining checks the training flags as a task of this cluster would,
// and the files every task shares here; it returns the job's train steps.
func (l *localFlags) checkTraining(ownProgram bool) (trainSteps int64, err error) {
	f := l.train
	probe := *f
	probe.cluster = func() clusterFlagsT { return localProbeCluster(l.numPS, l.numWorkers) }
	probeCfg, err := probe.config("", func(string, ...any) {})
	if err != nil {
		return 0, err
	}
	// Every task runs on this machine: a training list that holds the
	// test file is refused once, here, rather than by every worker.
	if f.model == "sparse_lr" && f.trainData != "" && f.testData != "" {
		if err := sparselr.CheckDisjoint(f.trainData, f.testData, f.dataDir); err != nil {
			return 0, err
		}
	}
	if f.resultFile != "" && !ownProgram {
		if err := checkResultFile(f.resultFile); err != nil {
			return 0, err
		}
	}
	if f.checkpointDir != "" {
		if err := checkCheckpointDir(f.checkpointDir); err != nil {
			return 0, err
		}
	}
	return probeCfg.TrainSteps, nil
}

// checkWorkerCmd refuses an own program that is not there, and
// --result_file beside one.
func (j *localJob) checkWorkerCmd() error {
	if len(j.workerCmd) == 0 {
		return nil
	}
	if _, err := exec.LookPath(j.workerCmd[0]); err != nil {
		return fmt.Errorf("the workers' command %q: %v", j.workerCmd[0], err)
	}
	if len(j.chief) > 0 {
		return fmt.Errorf("--result_file is for the built-in models; with -- CMD give your program its own")
	}
	return nil
}

// run starts the cluster, waits for it and returns local's exit status.
func (j *localJob) run(ctx context.Context, stdout, stderr io.Writer) int {
	f := j.train
	logf := f.telemetry.logger(stderr)
	logf("%s", version.Get().Short())
	var psExit time.Duration // the default
	if len(j.workerCmd) > 0 {
		psExit = 5 * time.Second // a program that does not call done
	}
	progressOn, trainSteps, chiefURL := j.progressOn, j.trainSteps, ""
	var workerEnvs [][]string
	if len(j.workerCmd) > 0 {
		var err error
		if workerEnvs, chiefURL, err = f.telemetry.ownLoopEnvs(f.set("metrics_addr"), j.numWorkers); err != nil {
			fmt.Fprintf(stderr, "paramserv local: %v\n", err)
			return 1
		}
		progressOn, trainSteps = chiefURL != "", 0 // the program's own goal
	}
	out, errOut, stopProgress := startProgress(ctx, stdout, stderr, progressOn, trainSteps, chiefURL)
	stepAtStop := int64(-1)
	err := local.Run(ctx, local.Config{
		NumPS: j.numPS, NumWorkers: j.numWorkers, PSExitTimeout: psExit,
		Exe: j.exe, Subcommand: "train", Args: j.pass, ChiefArgs: j.chief, WorkerCmd: j.workerCmd, WorkerEnv: append(f.tls.files.Env(), ownProgramEnv(f)...), WorkerEnvs: workerEnvs,
		Out: out, Err: errOut, Logf: logf,
		RestartPS: j.restartPS, RestartWorkers: j.restartWorkers, MaxRestarts: j.maxRestarts,
		Interrupted: func(ps []string) { stepAtStop = globalStep(ps[0]) },
		Replicas:    f.rep.replicas,
	})
	stopProgress()
	var sig *SignalError
	if err != nil && errors.As(context.Cause(ctx), &sig) {
		logf("%s", interruptedLine(stepAtStop, f.checkpointDir))
		return sig.ExitCode()
	}
	if err != nil {
		logf("%v", err)
		var fail *local.Failure
		if errors.As(err, &fail) && fail.InputToFix {
			return 2
		}
		return 1
	}
	logf("all %d processes exited 0", j.numPS+j.numWorkers)
	return 0
}

// maxArgLen is Linux's limit on one argument or environment string
// (MAX_ARG_STRLEN, 32 pages of 4 KiB): every task's --ps_hosts and
// --worker_hosts, and an own program's TF_CONFIG, list every host:port.
const maxArgLen = 128 << 10

// maxLocalTasks is how many processes one local cluster can hold here, and
// what bounds it: local keeps three open files per process (its stdout and
// stderr pipes and the process handle) under this process's open-file
// limit, and a TF_CONFIG listing every task ("127.0.0.1:NNNNN", 18 bytes
// each) must fit in one environment string. Past it, starting used to take
// minutes before failing for want of files, ports or argument space.
func maxLocalTasks() (most int, why string) {
	most, why = (maxArgLen-200)/18, "every task's command line or TF_CONFIG lists every host:port, and Linux allows one such string 128 KiB"
	if lim, ok := openFileLimit(); ok && lim < uint64(3*most+64) {
		most, why = max(0, int(lim)-64)/3, fmt.Sprintf("each process takes 3 of this process's open files, whose limit is %d (ulimit -n)", lim)
	}
	return most, why
}

// globalStep asks the ps at addr for the job's global step; -1 if it does
// not answer within a second.
func globalStep(addr string) int64 {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return -1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := pb.NewParamServerClient(conn).Status(ctx, &pb.StatusRequest{})
	if err != nil || !st.Initialized {
		return -1
	}
	return st.GlobalStep
}

// interruptedLine is local's one line after Ctrl-C: where training stood
// and the newest checkpoint to resume from.
func interruptedLine(step int64, checkpointDir string) string {
	at := "interrupted before training started"
	if step >= 0 {
		at = fmt.Sprintf("interrupted at global step %d", step)
	}
	switch {
	case checkpointDir == "":
		return at + "; no checkpoint (no --checkpoint_dir)"
	default:
		m, _, err := checkpoint.Verifier{Finite: true}.Latest(vfs.OS, checkpointDir)
		if err != nil {
			return fmt.Sprintf("%s; no valid checkpoint in %s", at, checkpointDir)
		}
		return fmt.Sprintf("%s; newest checkpoint %s (step %d): the same command resumes from it", at,
			filepath.Join(checkpointDir, checkpoint.CheckpointName(m.Step)), m.Step)
	}
}
