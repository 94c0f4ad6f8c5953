package main

// Exit statuses: a task stopped by SIGTERM is a death, not a success; input
// to fix is exit 2, from train and from local alike.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// A ps sent SIGTERM in mid-training under local exits 143 with a line that
// says why, local restarts it as it would a killed one, and the job ends
// with the right model.
func TestSIGTERMToPSUnderLocal(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=6000", "--steps_to_validate=500",
		"--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=500", "--recovery_timeout=1m", "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, time.Minute)
	ps := findChild(t, p.cmd.Process.Pid, "ps", 0)
	if err := syscall.Kill(ps, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.output()
	for _, want := range []string{
		"ps 0: received SIGTERM at global step ",
		"before every worker finished (0 of 2 done); exiting 143",
		"ps0 exited unexpectedly (exit status 143 (stopped by SIGTERM)); restarting it",
		"all 3 processes exited 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	r := readResult(t, res)
	checkLinreg(t, r)
	if r.GlobalStep < 6000 {
		t.Errorf("global step %d, want >= 6000", r.GlobalStep)
	}
}

// A worker sent SIGTERM under local is restarted too, and the job ends well.
func TestSIGTERMToWorkerUnderLocal(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "result.json")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=2", "--model=linreg", "--train_steps=6000", "--steps_to_validate=500",
		"--checkpoint_dir="+filepath.Join(dir, "ckpt"), "--save_steps=500", "--result_file="+res)
	p.waitCount(t, "saved checkpoint of step", 2, time.Minute)
	w := findChild(t, p.cmd.Process.Pid, "worker", 1)
	if err := syscall.Kill(w, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.output()
	for _, want := range []string{
		"worker 1: received SIGTERM before training finished",
		"worker1 exited unexpectedly (exit status 143 (stopped by SIGTERM)); restarting it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkLinreg(t, readResult(t, res))
}

// `train` stopped by SIGTERM or SIGINT before its work is done exits
// 128+signal and says why; a ps with no worker ever coming included.
func TestTrainSignalledExitsNonZero(t *testing.T) {
	for _, tc := range []struct {
		job  string
		sig  syscall.Signal
		code int
		want string
	}{
		{"ps", syscall.SIGTERM, 143, "ps 0: received SIGTERM at global step 0 before every worker finished (0 of 2 done); exiting 143"},
		{"ps", syscall.SIGINT, 130, "ps 0: received SIGINT at global step 0 before every worker finished (0 of 2 done); exiting 130"},
		{"worker", syscall.SIGTERM, 143, "worker 1: received SIGTERM before training finished"},
		// Waiting for the ps's host name to resolve (a pod whose peers'
		// DNS names are not there yet): a death by signal too, not exit 1.
		{"worker-dns", syscall.SIGTERM, 143, "worker 1: received SIGTERM while waiting for the cluster's host names to resolve; exiting 143"},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.job, tc.sig), func(t *testing.T) {
			hosts := freeHosts(t, 3)
			job, idx := tc.job, 0
			if tc.job != "ps" {
				job, idx = "worker", 1
			}
			if tc.job == "worker-dns" {
				hosts[0] = "paramserv-no-such-host.invalid:2222"
			}
			p := start(t, tc.job, nil, clusterArgs(hosts[:1], hosts[1:], job, idx)...)
			switch tc.job {
			case "ps":
				p.waitFor(t, "serving on", time.Minute)
			case "worker-dns":
				p.waitFor(t, "cannot resolve paramserv-no-such-host.invalid", time.Minute)
			default:
				p.waitFor(t, "cluster of 1 ps and 2 workers", time.Minute)
			}
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, time.Minute); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			if out := p.output(); !strings.Contains(out, tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// Numbers outside what a flag means are refused at start with exit 2 and a
// first line naming the flag, for train, local, bench, ckpt and data.
func TestBadNumbersExitTwo(t *testing.T) {
	trainCases := []struct{ arg, want string }{
		{"--startup_timeout=-1s", "--startup_timeout=-1s: want a duration > 0"},
		{"--startup_timeout=0s", "--startup_timeout=0s: want a duration > 0"},
		{"--worker_timeout=-1s", "--worker_timeout=-1s: want a duration > 0"},
		{"--worker_timeout=0s", "--worker_timeout=0s: want a duration > 0"},
		{"--wait_log_every=-1s", "--wait_log_every=-1s: want a duration > 0"},
		{"--wait_log_every=0s", "--wait_log_every=0s: want a duration > 0"},
		{"--recovery_timeout=0s", "--recovery_timeout=0s: want a duration > 0"},
		{"--recovery_timeout=-5s", "--recovery_timeout=-5s: want a duration > 0"},
		{"--sync_timeout=-1s", "--sync_timeout=-1s: want a duration >= 0 (0: forever)"},
		{"--save_steps=-1", "--save_steps=-1: want a number >= 0"},
		{"--save_model_secs=-1", "save_model_secs"},
		{"--keep_checkpoints=0", "--keep_checkpoints=0: want a number >= 1"},
		{"--save_summaries_steps=0", "--save_summaries_steps=0: want a number >= 1"},
		{"--metrics_addr=:x", "--metrics_addr"},
		{"--train_steps=0", "--train_steps=0: want a number > 0"},
		{"--train_steps=-5", "--train_steps=-5: want a number > 0"},
		{"--steps_to_validate=0", "--steps_to_validate=0: want a number > 0"},
		{"--batch_size=0", "--batch_size=0: want a number > 0"},
		{"--batch_size=-1", "--batch_size=-1: want a number > 0"},
		{"--hidden_units=0", "--hidden_units=0: want a number > 0"},
		{"--split_bytes=-1", "--split_bytes=-1: want a number > 0"},
		{"--split_bytes=0", "--split_bytes=0: want a number > 0"},
		{"--replicas_to_aggregate=0", "--replicas_to_aggregate=0: want a number > 0"},
		{"--replicas_to_aggregate=5", "--replicas_to_aggregate=5: want 1 to the number of workers"},
		{"--max_staleness=-1", "--max_staleness=-1: want a number >= 0"},
		{"--min_count=-1", "--min_count=-1: want a number >= 0"},
		{"--evict_after_steps=-1", "--evict_after_steps=-1: want a number >= 0"},
		{"--max_table_keys=-1", "--max_table_keys=-1: want a number >= 0"},
		{"--num_features=-1", "num_features"},
		{"--learning_rate=0", "--learning_rate=0: want a number > 0"},
		{"--learning_rate=-0.5", "--learning_rate=-0.5: want a number > 0"},
		{"--learning_rate=NaN", "--learning_rate=NaN: want > 0 and finite"},
		{"--momentum=-1", "--momentum=-1: want >= 0"},
		{"--beta1=1", "--beta1=1: want >= 0 and < 1"},
		{"--beta2=-0.1", "--beta2=-0.1: want >= 0 and < 1"},
		{"--epsilon=-1", "--epsilon=-1: want >= 0"},
		{"--initial_accumulator_value=-1", "--initial_accumulator_value=-1: want >= 0"},
		{"--ftrl_beta=-1", "--ftrl_beta=-1: want >= 0"},
		{"--l1=-1", "--l1=-1: want >= 0"},
		{"--l2=-1", "--l2=-1: want >= 0"},
		{"--rho=1", "--rho=1: want >= 0 and < 1"},
		{"--weight_decay=-1", "--weight_decay=-1: want >= 0"},
		{"--l2_shrinkage=-1", "--l2_shrinkage=-1: want >= 0"},
		{"--learning_rate_power=0.5", "--learning_rate_power=0.5: want <= 0 and finite"},
		{"--lr_schedule=cosine()", "--lr_schedule: optim: invalid learning-rate schedule \"cosine()\": cosine: missing decay_steps"},
		{"--epochs=-1", "--epochs=-1: want 0"},
		{"--epochs=1", "--model=linreg reads its data until --train_steps; only sparse_lr counts passes"},
	}
	type tc struct {
		args []string
		want string
	}
	var cases []tc
	cluster := []string{"--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2,127.0.0.1:3", "--job_name=worker", "--task_index=1"}
	for _, c := range trainCases {
		cases = append(cases,
			tc{append(append([]string{"train"}, cluster...), c.arg), c.want},
			tc{[]string{"local", "--workers=2", c.arg}, c.want})
	}
	cases = append(cases, []tc{
		{[]string{"train", "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2", "--job_name=worker", "--task_index=-1"}, "task_index"},
		{append(append([]string{"train"}, cluster...), "--model=sparse_lr", "--train_data=x.svm", "--epochs=1", "--sync_replicas"), "--epochs=1 with --sync_replicas and 2 workers needs --sync_on_timeout=proceed"},
		{[]string{"local", "--workers=2", "--model=sparse_lr", "--train_data=x.svm", "--epochs=1", "--sync_replicas"}, "--epochs=1 with --sync_replicas and 2 workers needs --sync_on_timeout=proceed"},
		{[]string{"local", "--ps=0"}, "--ps=0: want a number >= 1"},
		{[]string{"local", "--max_table_keys=10", "--table_memory=1MiB"}, "--max_table_keys counts the rows in memory, and --table_memory keeps rows past its budget on disk"},
		{[]string{"local", "--workers=0"}, "--workers=0: want a number >= 1"},
		{[]string{"local", "--max_restarts=-1"}, "--max_restarts=-1: want a number >= 0"},
		// More processes than one machine's cluster can hold: refused at
		// once, not after minutes of starting them.
		{[]string{"local", "--ps=100000"}, "--ps=100000 --workers=2: 100002 processes, want at most "},
		{[]string{"bench", "--ps=0"}, "--ps=0: want a number >= 1"},
		{[]string{"bench", "--workers=-1"}, "--workers=-1: want a number >= 1"},
		{[]string{"bench", "--reps=-1"}, "--reps=-1: want a number >= 0"},
		{[]string{"bench", "--warmup=-2"}, "--warmup=-2: want a number >= -1"},
		{[]string{"bench", "--mem_ops=-1"}, "--mem_ops=-1: want a number >= 0"},
		{[]string{"bench", "--mem_dim=0"}, "--mem_dim=0: want a number >= 1"},
		{[]string{"bench", "--split_bytes=-1"}, "--split_bytes=-1: want a number >= 0"},
		{[]string{"ckpt", "inspect", t.TempDir(), "--step=-5"}, "--step=-5: want a step >= 0"},
		{[]string{"data", "synth-ctr", "--out=" + t.TempDir(), "--rows=0"}, "rows 0: want >= 1"},
		{[]string{"data", "synth-ctr", "--out=" + t.TempDir(), "--test_rows=-1"}, "test rows -1: want >= 0"},
		{[]string{"data", "synth-ctr", "--out=" + t.TempDir(), "--shards=0"}, "shards 0: want 1..100000"},
		{[]string{"data", "synth-ctr", "--out=" + t.TempDir(), "--fields=0"}, "fields 0: want 1..1000"},
		{[]string{"data", "synth-ctr", "--out=" + t.TempDir(), "--parallel=-1"}, "parallel -1: want >= 0"},
	}...)
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			args := c.args
			if args[0] == "train" || args[0] == "local" {
				// The optimizer whose hyper-parameter the flag is.
				for opt, flags := range map[string][]string{"momentum": {"--momentum="}, "adam": {"--beta1=", "--beta2=", "--epsilon="},
					"adagrad": {"--initial_accumulator_value="}, "ftrl": {"--ftrl_beta=", "--l1=", "--l2=", "--l2_shrinkage=", "--learning_rate_power="},
					"adadelta": {"--rho="}, "adamw": {"--weight_decay="}} {
					for _, fl := range flags {
						if strings.HasPrefix(args[len(args)-1], fl) {
							args = append(slices.Clone(args), "--optimizer="+opt)
						}
					}
				}
				if strings.HasPrefix(args[len(args)-1], "--replicas_to_aggregate=") {
					args = append(slices.Clone(args), "--sync_replicas")
				}
			}
			p := start(t, args[0], nil, args...)
			if code := p.wait(t, 30*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, p.output())
			}
			first, _, _ := strings.Cut(p.output(), "\n")
			if !strings.Contains(first, c.want) {
				t.Fatalf("first line %q lacks %q; output:\n%s", first, c.want, p.output())
			}
		})
	}
}

// A --checkpoint_dir that is a file, or cannot be created, is refused at
// start with exit 2, by local and by the ps and the chief, before any
// training; other workers never write there and do not check it.
func TestUnusableCheckpointDirExitsTwo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []struct{ path, why string }{
		{file, "is a file, want a directory"},
		{filepath.Join(file, "sub"), "cannot create the directory: mkdir " + file + ": not a directory"},
	} {
		for _, job := range []string{"local", "ps", "chief"} {
			t.Run(job+" "+dir.path, func(t *testing.T) {
				hosts := freeHosts(t, 2)
				var args []string
				switch job {
				case "local":
					args = []string{"local", "--workers=1"}
				case "ps":
					args = clusterArgs(hosts[:1], hosts[1:], "ps", 0)
				case "chief":
					args = clusterArgs(hosts[:1], hosts[1:], "worker", 0)
				}
				p := start(t, job, nil, append(args, "--checkpoint_dir="+dir.path)...)
				if code := p.wait(t, 30*time.Second); code != 2 {
					t.Fatalf("exit %d, want 2", code)
				}
				out := p.output()
				if want := "--checkpoint_dir=" + dir.path + ": " + dir.why; !strings.Contains(out, want) {
					t.Fatalf("output lacks %q:\n%s", want, out)
				}
				if strings.Contains(out, "cluster of") || strings.Contains(out, "local cluster") {
					t.Fatalf("a task started before the directory was checked:\n%s", out)
				}
			})
		}
	}
}

// A test file is never read as training data: a training list that holds
// the --test_data file (a directory holding it, another name for it) is
// refused with exit 2 naming both, by local at once and by a worker.
func TestTrainingOnTheTestFileExitsTwo(t *testing.T) {
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	os.WriteFile(train, []byte("+1 1:1 3:1\n-1 2:1\n"), 0o644)
	os.WriteFile(test, []byte("+1 1:1\n-1 2:1\n"), 0o644)
	link := filepath.Join(t.TempDir(), "link.svm")
	if err := os.Symlink(test, link); err != nil {
		t.Fatal(err)
	}
	hosts := freeHosts(t, 2)
	for _, c := range []struct {
		name       string
		args       []string
		trainData  string
		testData   string
		dataDirArg string
	}{
		{"local, directory", []string{"local", "--workers=1"}, dir, test, ""},
		{"local, data_dir", []string{"local", "--workers=1"}, filepath.Base(dir), filepath.Join(filepath.Base(dir), "test.svm"), "--data_dir=" + filepath.Dir(dir)},
		{"local, symlink", []string{"local", "--workers=1"}, train + "," + link, test, ""},
		{"worker", clusterArgs(hosts[:1], hosts[1:], "worker", 0), dir, test, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(slices.Clone(c.args), "--model=sparse_lr", "--train_data="+c.trainData, "--test_data="+c.testData, "--train_steps=10")
			if c.dataDirArg != "" {
				args = append(args, c.dataDirArg)
			}
			p := start(t, c.name, nil, args...)
			if code := p.wait(t, 30*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			want := "--train_data=" + c.trainData + " reads the --test_data=" + c.testData + " file ("
			if out := p.output(); !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		})
	}
}

// The a9a command the README used to give (the directory a9a, which holds
// a9a.t too) is refused.
func TestA9ADirectoryWithTestFileRefused(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	p := start(t, "local", nil, "local", "--ps=2", "--workers=2", "--model=sparse_lr", "--optimizer=ftrl",
		"--train_data=a9a", "--test_data=a9a.t", "--input_format=libsvm", "--num_features=123", "--data_dir="+data)
	if code := p.wait(t, 30*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if want := "--train_data=a9a reads the --test_data=a9a.t file (" + filepath.Join(data, "a9a", "a9a.t") + ")"; !strings.Contains(p.output(), want) {
		t.Fatalf("output lacks %q:\n%s", want, p.output())
	}
}

// A ps whose workers have all finished exits 0 on SIGTERM: with
// --ps_wait_forever, SIGTERM is how it is meant to end.
func TestSIGTERMAfterEveryWorkerFinishedExitsZero(t *testing.T) {
	hosts := freeHosts(t, 2)
	ps := start(t, "ps", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), "--ps_wait_forever")...)
	w := start(t, "worker", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 0), "--model=linreg", "--train_steps=200")...)
	if code := w.wait(t, time.Minute); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	ps.waitFor(t, "worker 0 finished (1 of 1 done)", time.Minute)
	if err := ps.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps exited %d after every worker finished, want 0", code)
	}
}

// A chief whose cluster has another number of workers than its ps's is
// input to fix: it exits 2 naming both counts and the flag, where the
// ps's refusal of its Init used to end it with exit 1.
func TestChiefWithAnotherWorkerCountExitsTwo(t *testing.T) {
	hosts := freeHosts(t, 3)
	ps := start(t, "ps0", nil, append(clusterArgs(hosts[:1], hosts[1:2], "ps", 0), "--startup_timeout=1m")...)
	ps.waitFor(t, "serving on", time.Minute)
	w := start(t, "worker0", nil, clusterArgs(hosts[:1], hosts[1:], "worker", 0)...)
	if code := w.wait(t, time.Minute); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	want := "ps 0 at " + hosts[0] + " was started with 1 workers in its cluster, the chief with 2: give every task the same --worker_hosts"
	if out := w.output(); !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
}

// `train --standalone` stops on SIGTERM as a worker does, exit 143; it
// used to train on to --train_steps and exit 0, deaf to Ctrl-C, with no ps
// whose calls would end with the context.
func TestStandaloneSignalledExitsNonZero(t *testing.T) {
	p := start(t, "standalone", nil, "train", "--standalone", "--model=linreg", "--train_steps=1000000000000")
	p.waitFor(t, "standalone: 2 variables", time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 143 {
		t.Fatalf("exit %d, want 143", code)
	}
	if want := "worker 0: received SIGTERM before training finished"; !strings.Contains(p.output(), want) {
		t.Fatalf("output lacks %q:\n%s", want, p.output())
	}
}

// A signal stops a load of the data in progress, where the load read to its
// end first: /dev/zero (one line without end, consumed and never kept)
// used to be read until the process was killed.
func TestSignalStopsALoad(t *testing.T) {
	p := start(t, "standalone", nil, "train", "--standalone", "--model=sparse_lr", "--train_data=/dev/zero", "--num_features=10", "--train_steps=10")
	p.waitFor(t, "sparse_lr: worker 0 loading training data", time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 143 {
		t.Fatalf("exit %d, want 143", code)
	}
	if want := "the read was stopped"; !strings.Contains(p.output(), want) {
		t.Fatalf("output lacks %q:\n%s", want, p.output())
	}
}
