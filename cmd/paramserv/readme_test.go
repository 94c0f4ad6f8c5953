package main

// The README and every page of docs/ are tested: every command of their
// ```sh blocks runs here, in a fresh directory, against the binary the
// tests built, so that the docs and the code cannot drift apart. The rules
// that make it quick:
//
//   - ./paramserv, a leading paramserv and go run ./cmd/paramserv are the
//     tests' binary;
//   - a built-in model trains at most 60 global steps (--train_steps=N
//     becomes min(N, 60); a local or train command of a built-in model
//     without it gets --train_steps=60) and logs every 20
//     (--steps_to_validate=20); synth-ctr writes at most 20,000 rows; bench
//     runs one small size of each case with few repetitions;
//   - with -short, the commands that load MNIST and bench are left out
//     (about 25 s of the test's 35 s on a 2-core machine);
//   - optional parts written [--like=this] are left out;
//   - data/ is the shared data directory (../shared/data or
//     $PARAMSERV_DATA), so that data fetch finds every file present;
//   - the three train commands of one cluster run together, on free ports;
//   - the TF_CONFIG example, whose hosts are not this machine's, must say
//     it cannot resolve h0 and exit 1 after --startup_timeout=1s;
//   - lda trains 3 sweeps; go test commands (benchmarks) are left out, and
//     liblinear-train where it is not installed;
//   - docker and kubectl commands (docs/DEPLOY.md) need a container runtime
//     or a Kubernetes cluster, which a test machine has not: they are left
//     out with a line (TestDockerfile* check the image's build);
//   - commands other tests run are left to them: ./scripts/test (this
//     test's own runner), go build / go install (the binary is built), the
//     Python ones (TestTorch*) and the Go module example
//     (TestOwnModelInASeparateModule).
//
// Where the README quotes an output, the test checks it (readmeWants).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/version"
)

// docPages are the files whose sh blocks TestREADME runs: README.md, then
// every page of docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, pages...)
}

// readmeCommands returns the commands of a page's sh blocks, one per
// line, continuations joined, comments and optional parts removed.
func readmeCommands(t *testing.T, page string) []string {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	in, cont := false, ""
	optional := regexp.MustCompile(`\s*\[--[^\]]*\]`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		}
		line = cont + strings.TrimSpace(line)
		cont = ""
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`) + " "
			continue
		}
		if i := strings.Index(line, "  #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(optional.ReplaceAllString(line, ""))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmds = append(cmds, line)
	}
	return cmds
}

// readmeWants are outputs the README quotes, by a piece of the command
// that prints them.
var readmeWants = map[string][]string{
	"go run ./cmd/paramserv local --ps=2 --workers=2 --model=linreg": {"all 4 processes exited 0", "step: "},
	"local --ps=1 --workers=2 --model=mnist":                         {"Worker 0: training step ", "Training elapsed time", "validation cross entropy = "},
	"data fetch mnist --dir=data":                                    {"mnist is in data"},
	"data fetch a9a --dir=data":                                      {"a9a is in data"},
	"--model=sparse_lr --optimizer=ftrl":                             {`"test_auc":`},
	"ckpt ls ckpt":                                                   {"CHECKPOINT  STEP", " ok"},
	"ckpt inspect ckpt":                                              {"hid_w"},
	"eval --checkpoint_dir=ckpt":                                     {"eval of ckpt/ckpt-60: global step 60"},
	"export --checkpoint_dir=ckpt":                                   {"to model.safetensors"},
	"version":                                                        {fmt.Sprintf("wire protocol: %d\n", version.Protocol)},
	"bench":                                                          {"pushpull"},
}

func TestREADME(t *testing.T) {
	data := testutil.DataDir(t, "SHA256SUMS")
	total, ran := 0, 0
	for _, page := range docPages(t) {
		dir := t.TempDir() // a page's commands share a directory, pages do not
		if err := os.Symlink(data, filepath.Join(dir, "data")); err != nil {
			t.Fatal(err)
		}
		cmds := readmeCommands(t, page)
		total += len(cmds)
		ran += runDocCommands(t, dir, filepath.Base(page), cmds)
	}
	if total < 15 {
		t.Fatalf("found %d commands in the sh blocks of README.md and docs/", total)
	}
	t.Logf("README and docs: ran %d of %d commands", ran, total)
}

// runDocCommands runs one page's commands in dir and returns how many ran.
func runDocCommands(t *testing.T, dir, page string, cmds []string) int {
	t.Helper()
	steps := regexp.MustCompile(`--train_steps=(\d+)`)
	rows := regexp.MustCompile(`--rows=(\d+)`)
	var cluster []string // the train commands of one cluster
	ran := 0
	for _, c := range cmds {
		skip := ""
		switch {
		case c == "./scripts/test":
			skip = "this test's own runner"
		case strings.HasPrefix(c, "go build ") || strings.Contains(c, " go build ") || strings.HasPrefix(c, "go install "):
			skip = "the tests built the binary"
		case strings.Contains(c, "python") || strings.Contains(c, "examples/torch/"):
			skip = "run by TestTorch*"
		case strings.Contains(c, "examples/go/linreg"):
			skip = "run by TestOwnModelInASeparateModule"
		case strings.HasPrefix(c, "go test ") || strings.Contains(c, " go test ") || strings.Contains(c, "scripts/bench/"):
			skip = "a benchmark, run by hand"
		case strings.HasPrefix(c, "docker ") || strings.HasPrefix(c, "kubectl "):
			skip = "needs a container runtime or a Kubernetes cluster"
		case strings.HasPrefix(c, "liblinear-train ") && !haveCommand("liblinear-train"):
			skip = "liblinear-train is not installed (Debian's liblinear-tools)"
		case testing.Short() && (strings.Contains(c, "--model=mnist") || strings.Contains(c, " bench ") ||
			strings.Contains(c, "ckpt") && !strings.Contains(c, "sparse_lr")):
			skip = "-short: MNIST and bench"
		}
		if skip != "" {
			t.Logf("%s: skipped (%s): %s", page, skip, c)
			continue
		}
		run := strings.ReplaceAll(c, "go run ./cmd/paramserv", "./paramserv")
		if strings.HasPrefix(run, "paramserv ") {
			run = "./" + run
		}
		run = strings.ReplaceAll(run, "./paramserv", binary)
		builtin := (strings.Contains(run, " local ") || strings.Contains(run, " train")) && !strings.Contains(run, " -- ")
		if m := steps.FindStringSubmatch(run); m != nil {
			n, _ := strconv.Atoi(m[1])
			run = strings.Replace(run, m[0], fmt.Sprintf("--train_steps=%d", min(n, 60)), 1)
		} else if builtin {
			run += " --train_steps=60"
		}
		if strings.Contains(run, "--model=lda") {
			// lda's steps are sweeps over its whole part of the corpus
			run = strings.Replace(run, "--train_steps=60", "--train_steps=3", 1)
		}
		if builtin && !strings.Contains(run, "--steps_to_validate") {
			run += " --steps_to_validate=20"
		}
		if m := rows.FindStringSubmatch(run); m != nil {
			n, _ := strconv.Atoi(m[1])
			run = strings.Replace(run, m[0], fmt.Sprintf("--rows=%d", min(n, 20000)), 1)
		}
		if strings.Contains(run, " bench ") {
			run = regexp.MustCompile(`--dense_bytes=\S+`).ReplaceAllString(run, "--dense_bytes=64K")
			run = regexp.MustCompile(`--sparse_keys=\S+`).ReplaceAllString(run, "--sparse_keys=1k")
			run += " --reps=3 --warmup=1"
		}
		if strings.Contains(run, " train --job_name=") {
			cluster = append(cluster, run)
			if len(cluster) == 3 {
				runREADMECluster(t, dir, cluster)
				cluster = nil
				ran += 3
			}
			continue
		}
		want, wantCode := []string(nil), 0
		if strings.HasPrefix(run, "TF_CONFIG=") {
			run += " --startup_timeout=1s"
			want, wantCode = []string{"cannot resolve h0 (TF_CONFIG cluster.ps[0], the address of ps 0); retrying until --startup_timeout"}, 1
		}
		for piece, w := range readmeWants {
			if strings.Contains(c, piece) {
				want = append(want, w...)
			}
		}
		if strings.Contains(c, "--model=sparse_lr --optimizer=ftrl") {
			run += " --result_file=sparse.json"
			want = nil // checked in the result file below
		}
		out, code := runREADMECommand(t, dir, run)
		ran++
		if code != wantCode {
			t.Errorf("%s command %q: exit %d, want %d\n%s", page, c, code, wantCode, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s command %q: output lacks %q (the page quotes it)\n%s", page, c, w, out)
			}
		}
		if strings.Contains(c, "--model=sparse_lr --optimizer=ftrl") {
			if b, err := os.ReadFile(filepath.Join(dir, "sparse.json")); err != nil || !strings.Contains(string(b), `"test_auc":`) {
				t.Errorf("%s command %q: no test_auc in the result file: %v %s", page, c, err, b)
			}
		}
	}
	if len(cluster) != 0 {
		t.Errorf("%s: %d train commands left over, want the three of one cluster", page, len(cluster))
	}
	return ran
}

// haveCommand reports whether name is a program on PATH.
func haveCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// runREADMECommand runs one command line with bash in dir, with a guard
// against a hang, and returns its output and exit status.
func runREADMECommand(t *testing.T, dir, line string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("README command %q still running after 3m:\n%s", line, out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("README command %q: %v", line, err)
	}
	return string(out), 0
}

// runREADMECluster runs the README's three train commands together, their
// fixed ports replaced by free ones; each must exit 0.
func runREADMECluster(t *testing.T, dir string, lines []string) {
	t.Helper()
	hosts := freeHosts(t, 3)
	var wg sync.WaitGroup
	outs, codes := make([]string, 3), make([]int, 3)
	for i, l := range lines {
		for k, port := range []string{"127.0.0.1:2222", "127.0.0.1:2223", "127.0.0.1:2224"} {
			l = strings.ReplaceAll(l, port, hosts[k])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], codes[i] = runREADMECommand(t, dir, l)
		}()
	}
	wg.Wait()
	for i := range lines {
		if codes[i] != 0 {
			t.Errorf("README cluster command %q: exit %d\n%s", lines[i], codes[i], outs[i])
		}
	}
}
