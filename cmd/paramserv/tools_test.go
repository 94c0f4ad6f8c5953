package main

// The tool subcommands (ckpt, eval, export, plot, status, data, certs,
// version) given input a user or an attacker might give: each refuses it
// with exit 2 and a message naming what was expected, never a Go panic,
// and never destroys what it reads or an existing file it was to replace.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// linregCheckpoint trains linreg for a few steps with one ps and returns
// its checkpoint directory (ckpt-0 ... ckpt-20) and summary events.
func linregCheckpoint(t *testing.T) string {
	t.Helper()
	ck := filepath.Join(t.TempDir(), "ckpt")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--model=linreg", "--train_steps=20",
		"--save_steps=10", "--save_summaries_steps=5", "--checkpoint_dir="+ck)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("local exited %d:\n%s", code, p.output())
	}
	return ck
}

// wantRefused checks exit 2, a message holding want on stderr, and no
// panic.
func wantRefused(t *testing.T, want string, args ...string) {
	t.Helper()
	code, out, errOut := runCLI(t, nil, args...)
	if code != 2 || !strings.Contains(errOut, want) || strings.Contains(errOut, "goroutine ") {
		t.Errorf("%v: exit %d, want 2 saying %q; stdout %q, stderr:\n%s", args, code, want, out, errOut)
	}
}

// export refuses to write into a checkpoint it reads (it replaced the
// shard it had just read, destroying the newest checkpoint), and onto a
// file that is not a regular one (its rename replaced the node itself:
// /dev/null, as root, became a regular file).
func TestExportRefusesItsOwnInputAndSpecialFiles(t *testing.T) {
	ck := linregCheckpoint(t)
	shard := filepath.Join(ck, "ckpt-20", "shard-0-of-1.safetensors")
	before, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "is inside the checkpoint ckpt-20", "export", "--checkpoint_dir="+ck, "--out="+shard)
	wantRefused(t, "is inside the checkpoint ckpt-10", "export", "--checkpoint_dir="+filepath.Join(ck, "ckpt-20"),
		"--out="+filepath.Join(ck, "ckpt-10", "model.safetensors"))
	if after, _ := os.ReadFile(shard); string(after) != string(before) {
		t.Errorf("export changed the shard it read")
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "is a named pipe, not a regular file", "export", "--checkpoint_dir="+ck, "--out="+fifo)
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the named pipe was replaced: %v %v", fi.Mode(), err)
	}
	// Beside the checkpoints is fine.
	if code, _, errOut := runCLI(t, nil, "export", "--checkpoint_dir="+ck, "--out="+filepath.Join(ck, "model.safetensors")); code != 0 {
		t.Errorf("export beside the checkpoints: exit %d:\n%s", code, errOut)
	}
	code, out, _ := runCLI(t, nil, "ckpt", "ls", ck)
	if code != 0 || !strings.Contains(out, "ckpt-20 ") || strings.Contains(out, "damaged") {
		t.Errorf("ckpt ls after the exports: exit %d:\n%s", code, out)
	}
	// ckpt ls of one checkpoint, as ls names it, lists that one (it said
	// "no checkpoints in ckpt/ckpt-10").
	code, out, _ = runCLI(t, nil, "ckpt", "ls", filepath.Join(ck, "ckpt-10"))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "ckpt-10 ") {
		t.Errorf("ckpt ls of ckpt-10: exit %d:\n%s", code, out)
	}
}

// A step below 0, a directory that is not there or is a file, and a
// second directory are input to fix.
func TestCheckpointToolsBadArguments(t *testing.T) {
	ck := linregCheckpoint(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	out := filepath.Join(t.TempDir(), "m.safetensors")
	wantRefused(t, "--step=-5: want a step >= 0", "export", "--checkpoint_dir="+ck, "--out="+out, "--step=-5")
	wantRefused(t, "no such directory", "export", "--checkpoint_dir="+missing, "--out="+out)
	wantRefused(t, "not a directory", "export", "--checkpoint_dir="+file, "--out="+out)
	wantRefused(t, "no such directory", "ckpt", "ls", missing)
	wantRefused(t, "not a directory", "ckpt", "inspect", file)
	wantRefused(t, `unexpected argument "extra"`, "ckpt", "ls", ck, "extra")
	wantRefused(t, `unexpected argument "extra"`, "ckpt", "inspect", "--step=10", ck, "extra")
	wantRefused(t, "no such directory", "eval", "--checkpoint_dir="+missing, "--model=linreg")
	wantRefused(t, "eval evaluates the built-in models", "eval", "--checkpoint_dir="+ck, "--model=mf")
	wantRefused(t, "is inside the checkpoint ckpt-20", "eval", "--checkpoint_dir="+ck, "--model=linreg",
		"--result_file="+filepath.Join(ck, "ckpt-20", "manifest.json"))
}

// eval of a sparse model on a checkpoint without its table said nothing
// and evaluated zeros (test AUC 0.5).
func TestEvalSparseModelOfAnotherCheckpoint(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	ck := linregCheckpoint(t)
	wantRefused(t, `has no sparse table "weights": it holds another model than --model=sparse_lr`,
		"eval", "--checkpoint_dir="+ck, "--model=sparse_lr", "--data_dir="+data, "--train_data=a9a/a9a", "--num_features=123")
}

// plot with no run or no -o said nothing; a width of 1e8 was a panic;
// a failed plot deleted the file it was to replace.
func TestPlotBadInput(t *testing.T) {
	ck := linregCheckpoint(t)
	png := filepath.Join(t.TempDir(), "p.png")
	if err := os.WriteFile(png, []byte("an earlier plot"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "name at least one run", "plot", "-o", png)
	wantRefused(t, "-o is required", "plot", ck)
	wantRefused(t, "want at most 16384 pixels", "plot", ck, "-o", png, "--width=100000000", "--height=100000000")
	wantRefused(t, `no run has the tag "nosuch"`, "plot", ck, "-o", png, "--tags=nosuch")
	if b, _ := os.ReadFile(png); string(b) != "an earlier plot" {
		t.Errorf("a failed plot changed the file it was to replace: %q", b)
	}
	wantRefused(t, "is a directory", "plot", ck, "-o", ck)
	if code, _, errOut := runCLI(t, nil, "plot", ck, "-o", png); code != 0 {
		t.Errorf("plot: exit %d:\n%s", code, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Dir(png)); len(ents) != 1 {
		t.Errorf("plot left files beside its output: %v", ents)
	}
}

// Every tool's --help exits 0 with its usage on stdout, each heading
// once; version's too (it exited 2: takes no arguments, got "--help").
func TestToolHelp(t *testing.T) {
	for _, args := range [][]string{{"version", "--help"}, {"status", "--help"}, {"plot", "--help"}, {"certs", "--help"}, {"export", "--help"}} {
		code, out, errOut := runCLI(t, nil, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: paramserv "+args[0]) || strings.Count(out, "Flags:") > 1 {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
		}
	}
	_, out, _ := runCLI(t, nil, "export", "--help")
	if !strings.Contains(out, "--out=FILE\n") {
		t.Errorf("export --help does not show --out=FILE:\n%s", out)
	}
	_, out, _ = runCLI(t, nil, "eval", "--help")
	if !strings.Contains(out, "--model=linreg|mnist|sparse_lr\n") {
		t.Errorf("eval --help offers models it refuses:\n%s", out)
	}
}

// certs: a validity that overflowed a time.Duration (a certificate valid
// until 2246 for 100000000 days), host and Secret names no certificate or
// Kubernetes takes, and an --out that cannot be written are input to fix.
func TestCertsBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"certs", "--ps_hosts=127.0.0.1", "--worker_hosts=127.0.0.1"}
	wantRefused(t, "--valid_days=100000000: want 1 to 36500", append(hosts, "--out="+filepath.Join(dir, "a"), "--valid_days=100000000")...)
	wantRefused(t, `--ps_hosts: entry 2 "bad host!"`, "certs", "--ps_hosts=h0:2222,bad host!", "--worker_hosts=127.0.0.1", "--out="+filepath.Join(dir, "b"))
	wantRefused(t, `--secret_name="Bad Name"`, append(hosts, "--out="+filepath.Join(dir, "c"), "--secret_name=Bad Name")...)
	wantRefused(t, "is not a directory", append(hosts, "--out="+file)...)
	if code, _, errOut := runCLI(t, nil, "certs", "--ps_hosts=[::1]:2222,ps-0.job_x.svc", "--worker_hosts=127.0.0.1", "--out="+filepath.Join(dir, "d")); code != 0 {
		t.Errorf("certs of good hosts: exit %d:\n%s", code, errOut)
	}
}

// data fetch: a second data set, a mirror that is not a URL and a --dir
// that is a file are input to fix, found before any download.
func TestDataFetchBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, `unexpected argument "mnist"`, "data", "fetch", "a9a", "mnist", "--dir="+dir)
	wantRefused(t, "--mirror=notaurl: want an http:// or https:// URL", "data", "fetch", "a9a", "--mirror=notaurl", "--dir="+dir)
	wantRefused(t, "is not a directory", "data", "fetch", "a9a", "--dir="+file, "--mirror=http://127.0.0.1:1/")
	wantRefused(t, "give --dir: want the directory", "data", "fetch", "a9a", "--dir=", "--mirror=http://127.0.0.1:1/")
}

// status says why a ps did not answer in a user's words, within its
// --timeout: nothing listening, or a server that is not a paramserv ps.
func TestStatusSaysWhyNoAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			// As an SSH server: its banner, then it waits for the client's.
			go func() {
				defer c.Close()
				c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	free := freeHosts(t, 1)[0]
	for host, want := range map[string]string{
		free:                "nothing listens there (connection refused)",
		lis.Addr().String(): "does not speak gRPC as a paramserv ps does",
	} {
		code, out, _ := runCLI(t, nil, "status", "--ps_hosts="+host, "--timeout=2s")
		if code != 1 || !strings.Contains(out, "ps 0 at "+host+": no answer: ") || !strings.Contains(out, want) {
			t.Errorf("status of %s: exit %d, want 1 saying %q:\n%s", host, code, want, out)
		}
	}
}

// status asks the ps of a job that authenticates with the job's files
// (it could not reach them at all: its connections were plain).
func TestStatusOfAnAuthenticatedJob(t *testing.T) {
	hosts := freeHosts(t, 2)
	certs := makeCerts(t, hosts[:1], hosts[1:])
	token := writeTokenFile(t, "a secret of more than sixteen bytes")
	auth := []string{"--tls_dir=" + certs, "--auth_token_file=" + token}
	ps := start(t, "ps0", nil, append(clusterArgs(hosts[:1], hosts[1:], "ps", 0), auth...)...)
	var code int
	var out string
	for range 100 { // until the ps listens
		code, out, _ = runCLI(t, nil, append([]string{"status", "--ps_hosts=" + hosts[0], "--timeout=2s"}, auth...)...)
		if code == 0 || !strings.Contains(out, "connection refused") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "ps 0 at "+hosts[0]+": not initialised") {
		t.Fatalf("status with the job's files: exit %d:\n%s\nps:\n%s", code, out, ps.output())
	}
	code, out, _ = runCLI(t, nil, "status", "--ps_hosts="+hosts[0], "--timeout=2s")
	if code != 1 || !strings.Contains(out, "--tls_dir or --auth_token_file") {
		t.Errorf("status without the job's files: exit %d:\n%s", code, out)
	}
	wantRefused(t, "auth_token_file", "status", "--ps_hosts="+hosts[0], "--auth_token_file="+filepath.Join(t.TempDir(), "missing"))
}

// A mistyped command gets a suggestion in three lines, as a mistyped flag
// does, not the whole usage.
func TestMistypedCommand(t *testing.T) {
	for typo, want := range map[string]string{"ckpts": "ckpt", "exprt": "export", "versoin": "version"} {
		code, out, errOut := runCLI(t, nil, typo)
		if code != 2 || out != "" || !strings.Contains(errOut, "did you mean "+want+"?") || strings.Count(errOut, "\n") > 3 {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s", typo, code, out, errOut)
		}
	}
}

// Ctrl-C stops a tool that does not watch for it: every command catches
// SIGINT and SIGTERM, and eval, blocked reading its data from a pipe,
// went on waiting.
func TestToolStopsOnSIGINT(t *testing.T) {
	ck := linregCheckpoint(t)
	fifo := filepath.Join(t.TempDir(), "train.svm")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "eval", nil, "eval", "--checkpoint_dir="+ck, "--model=sparse_lr", "--train_data="+fifo, "--num_features=10")
	// The pipe's other end opens once eval has opened it: eval is then past
	// its start and blocked reading.
	var w *os.File
	for i := 0; w == nil; i++ {
		var err error
		w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		switch {
		case errors.Is(err, syscall.ENXIO) && i < 3000:
			time.Sleep(10 * time.Millisecond) // no reader yet
		case err != nil:
			t.Fatalf("eval never opened its data: %v\n%s", err, p.output())
		}
	}
	defer w.Close()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 130 || !strings.Contains(p.output(), "received SIGINT; stopped") {
		t.Errorf("eval after SIGINT: exit %d, want 130:\n%s", code, p.output())
	}
}

// data synth-ctr stopped by SIGINT exits 130, not 2 (input to fix).
func TestSynthStoppedBySIGINT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ctr")
	p := start(t, "synth-ctr", nil, "data", "synth-ctr", "--rows=50000000", "--out="+out)
	for i := 0; ; i++ { // the directory is made once it is under way
		if _, err := os.Stat(out); err == nil {
			break
		} else if i == 3000 {
			t.Fatalf("synth-ctr never made %s:\n%s", out, p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 130 {
		t.Errorf("synth-ctr after SIGINT: exit %d, want 130:\n%s", code, p.output())
	}
	if _, err := os.Stat(filepath.Join(out, "meta.json")); err == nil {
		t.Errorf("an interrupted synth-ctr left meta.json, the mark of a complete directory")
	}
}

// status asks every ps at once: three that accept and stay silent are all
// connected to before status gives up on the first (asked one after the
// other, it took --timeout per ps).
func TestStatusAsksEveryPSAtOnce(t *testing.T) {
	var mu sync.Mutex
	var events []string
	var hosts []string
	for i := range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		hosts = append(hosts, lis.Addr().String())
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				events = append(events, fmt.Sprintf("accept %d", i))
				mu.Unlock()
				go func() {
					io.Copy(io.Discard, c) // silent until status hangs up
					c.Close()
					mu.Lock()
					events = append(events, fmt.Sprintf("close %d", i))
					mu.Unlock()
				}()
			}
		}()
	}
	code, out, _ := runCLI(t, nil, "status", "--ps_hosts="+strings.Join(hosts, ","), "--timeout=1s")
	if code != 1 || strings.Count(out, "nothing came within --timeout=1s") != 3 {
		t.Fatalf("status of three silent servers: exit %d:\n%s", code, out)
	}
	mu.Lock()
	defer mu.Unlock()
	accepts := 0
	for _, e := range events {
		if strings.HasPrefix(e, "close") {
			break
		}
		accepts++
	}
	if accepts < 3 {
		t.Errorf("status hung up on a ps before asking the others: %v", events)
	}
}
