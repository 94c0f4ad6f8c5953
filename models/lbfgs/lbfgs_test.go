package lbfgs

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/testutil"
)

// liblinearA9A is liblinear's objective on a9a for train -s 0 (C = 1, no
// bias) solved tightly (-e 1e-8, 10 Newton iterations): Debian's
// liblinear-tools 2.3.0, its model's w put into Objective.
// liblinearA9ASubset is the same for every 8th row of a9a (rows 0, 8, ...).
const (
	liblinearA9A       = 10529.5625846
	liblinearA9ASubset = 1318.4126706
)

// cluster runs numPS ps in this process on loopback ports and returns the
// TF_CONFIG of each worker, and a wait for the ps.
func cluster(t *testing.T, numPS, numWorkers int) (func(i int) string, func() error) {
	t.Helper()
	var ps, workers []string
	var lis []net.Listener
	for range numPS {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		ps = append(ps, fmt.Sprintf("%q", l.Addr().String()))
	}
	for i := range numWorkers {
		workers = append(workers, fmt.Sprintf(`"127.0.0.1:%d"`, 1+i))
	}
	spec := fmt.Sprintf(`"cluster":{"ps":[%s],"worker":[%s]}`, strings.Join(ps, ","), strings.Join(workers, ","))
	var wg sync.WaitGroup
	errs := make([]error, numPS)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	for i, l := range lis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = paramserv.ServePS(ctx, paramserv.PSConfig{
				TFConfig: fmt.Sprintf(`{%s,"task":{"type":"ps","index":%d}}`, spec, i),
				Listen:   func(string) (net.Listener, error) { return l, nil },
			})
		}()
	}
	return func(i int) string { return fmt.Sprintf(`{%s,"task":{"type":"worker","index":%d}}`, spec, i) },
		func() error {
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}
}

// runJob trains cfg on numPS ps and numWorkers workers in this process and
// returns the chief's result.
func runJob(t *testing.T, cfg Config, numPS, numWorkers int) *Result {
	t.Helper()
	tf, waitPS := cluster(t, numPS, numWorkers)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // fails the test rather than hang it
	defer cancel()
	results := make([]*Result, numWorkers)
	errs := make([]error, numWorkers)
	var wg sync.WaitGroup
	for i := range numWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.TFConfig = tf(i)
			results[i], errs[i] = Run(ctx, c)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if err := waitPS(); err != nil {
		t.Fatalf("ps: %v", err)
	}
	return results[0]
}

// readLiblinearModel reads w from a liblinear model file, its sign turned
// so that w·x > 0 means label +1 (liblinear's first label is the positive
// side).
func readLiblinearModel(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sign, inW := 1.0, false
	var w []float64
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case inW:
			v, err := strconv.ParseFloat(line, 64)
			if err != nil {
				t.Fatalf("%s: weight %q: %v", path, line, err)
			}
			w = append(w, sign*v)
		case strings.HasPrefix(line, "label "):
			if strings.Fields(line)[1] != "1" {
				sign = -1
			}
		case strings.HasPrefix(line, "bias ") && line != "bias -1":
			t.Fatalf("%s: %q, want a model without bias", path, line)
		case line == "w":
			inW = true
		}
	}
	return w
}

// subset writes every every-th row of a LIBSVM file (rows 0, every, ...)
// to a file of its own.
func subset(t *testing.T, path string, every int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if i%every == 0 {
			out = append(out, line)
		}
	}
	p := filepath.Join(t.TempDir(), filepath.Base(path)+"-sub")
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReachesLiblinearObjective trains every 8th row of a9a (4,071 rows)
// with 1 ps and 2 workers; TestReachesLiblinearObjectiveFull all of it.
func TestReachesLiblinearObjective(t *testing.T) {
	dir := testutil.DataDir(t, "a9a/a9a")
	reachesLiblinear(t, subset(t, filepath.Join(dir, "a9a", "a9a"), 8), liblinearA9ASubset, 0.83)
}

func TestReachesLiblinearObjectiveFull(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole of a9a: a few hundred evaluations, a minute under -race")
	}
	dir := testutil.DataDir(t, "a9a/a9a")
	reachesLiblinear(t, filepath.Join(dir, "a9a", "a9a"), liblinearA9A, 0.845)
}

// reachesLiblinear trains train with 1 ps and 2 workers and checks the
// objective reaches liblinear's (train -s 0) to 1e-6 relative: the stored
// value, and a fresh liblinear run where liblinear-train is installed;
// and the test accuracy on a9a.t.
func reachesLiblinear(t *testing.T, train string, stored, minAccuracy float64) {
	dir := testutil.DataDir(t, "a9a/a9a.t")
	res := runJob(t, Config{Train: train, Test: filepath.Join(dir, "a9a", "a9a.t"), NumFeatures: 123, M: 40, Logf: t.Logf}, 1, 2)
	all, err := ReadLIBSVM(train, 123, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The chief's objective, summed on the ps to 2^-24 per worker, against one computed here in float64.
	if got := Objective(all, res.W, 1); math.Abs(got-res.Objective) > 1e-10*got {
		t.Errorf("the chief's objective %.15g, recomputed at its w %.15g: differ by more than 1e-10 relative", res.Objective, got)
	}
	t.Logf("objective %.12g after %d iterations (%d evaluations), test accuracy %.4f; liblinear's %.12g", res.Objective, res.Iterations, res.Evaluations, res.TestAccuracy, stored)
	if rel := (res.Objective - stored) / stored; rel > 1e-6 {
		t.Errorf("objective %.12g, liblinear's %.12g: %.3g above it relative, want ≤ 1e-6", res.Objective, stored, rel)
	}
	if !(res.TestAccuracy > minAccuracy) {
		t.Errorf("test accuracy %.4f, want > %.3f", res.TestAccuracy, minAccuracy)
	}
	if _, err := exec.LookPath("liblinear-train"); err != nil {
		t.Logf("liblinear-train not installed (apt-get install liblinear-tools): compared with the stored objective only")
		return
	}
	model := filepath.Join(t.TempDir(), "a9a.model")
	if out, err := exec.Command("liblinear-train", "-s", "0", "-e", "1e-8", train, model).CombinedOutput(); err != nil {
		t.Fatalf("liblinear-train: %v\n%s", err, out)
	}
	fresh := Objective(all, readLiblinearModel(t, model), 1)
	t.Logf("fresh liblinear objective %.12g", fresh)
	if rel := (res.Objective - fresh) / fresh; rel > 1e-6 {
		t.Errorf("objective %.12g, a fresh liblinear's %.12g: %.3g above it relative, want ≤ 1e-6", res.Objective, fresh, rel)
	}
}

// TestLineSearchBacktracks drives the chief by hand in one dimension: a
// trial that raises f is refused and halved, one that lowers it enough is
// accepted and counted.
func TestLineSearchBacktracks(t *testing.T) {
	c := newChief(Config{C: 1, M: 5, MaxIterations: 100, GradTol: 1e-9, RelTol: 1e-15, Logf: t.Logf}, 1)
	// At 0: data gradient −5, loss 10; ∇f = −5, so the first trial is 1 (unit length).
	next, ctl := c.step([]float64{0}, []float32{-5, 10})
	if next[0] != 1 || ctl[0] != 1 || ctl[1] != 0 {
		t.Fatalf("first step: next %v, ctl %v; want [1], [1 0]", next, ctl)
	}
	// At 1 the loss rose by 100: refused, the step halved, nothing accepted.
	next, ctl = c.step([]float64{1}, []float32{-4, 100})
	if next[0] != 0.5 || ctl[0] != 1 || c.iter != 0 {
		t.Fatalf("after a rise: next %v, ctl %v, iterations %d; want [0.5], 1 accepted, 0 iterations", next, ctl, c.iter)
	}
	// At 0.5 it fell by 3: accepted.
	_, ctl = c.step([]float64{0.5}, []float32{-1, -3})
	if ctl[0] != 2 || c.iter != 1 || c.fk != 0.125+7 {
		t.Fatalf("after a fall: ctl %v, iterations %d, f %v; want 2 accepted, 1 iteration, f 7.125", ctl, c.iter, c.fk)
	}
}

func TestReadLIBSVMErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"2 1:1\n", "label is not ±1 or 0/1"},
		{"x 1:1\n", "label is not a number"},
		{"1 1-1\n", `token "1-1": not index:value`},
		{"1 0:1\n", "index out of 1..123"},
		{"1 124:1\n", "index out of 1..123"},
		{"1 3:nan\n", "not a finite number"},
	} {
		path := filepath.Join(dir, "d.svm")
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadLIBSVM(path, 123, 1, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "d.svm:1") {
			t.Errorf("%q: error %v, want one naming d.svm:1 and %q", c.text, err, c.want)
		}
	}
}

// TestPrintLiblinearObjective prints the objective of a liblinear model
// file (LIBLINEAR_MODEL) on LIBLINEAR_DATA: how the stored values were
// taken.
func TestPrintLiblinearObjective(t *testing.T) {
	model, data := os.Getenv("LIBLINEAR_MODEL"), os.Getenv("LIBLINEAR_DATA")
	if model == "" || data == "" {
		t.Skip("set LIBLINEAR_MODEL and LIBLINEAR_DATA")
	}
	d, err := ReadLIBSVM(data, 123, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("objective %.12g", Objective(d, readLiblinearModel(t, model), 1))
}

// TestRestartedWorkerRefused: a worker that starts once training has
// begun refuses to go on: its last loss and the chief's memory are lost.
func TestRestartedWorkerRefused(t *testing.T) {
	dir := testutil.DataDir(t, "a9a/a9a")
	tf, _ := cluster(t, 1, 2)
	cfg := Config{Train: subset(t, filepath.Join(dir, "a9a", "a9a"), 8), NumFeatures: 123, GradTol: 1e-300, RelTol: 1e-300, MaxIterations: 1 << 30}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fails the test rather than hang it
	defer cancel()
	chief := make(chan error, 1)
	iterating := make(chan struct{})
	var once sync.Once
	go func() {
		c := cfg
		c.TFConfig = tf(0)
		c.Logf = func(format string, args ...any) {
			if strings.HasPrefix(format, "lbfgs: iteration") {
				once.Do(func() { close(iterating) })
			}
		}
		_, err := Run(ctx, c)
		chief <- err
	}()
	first, stop := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() {
		c := cfg
		c.TFConfig = tf(1)
		_, err := Run(first, c)
		firstDone <- err
	}()
	select {
	case <-iterating:
	case <-ctx.Done():
		t.Fatal("the chief never iterated")
	}
	stop() // worker 1 dies
	<-firstDone
	c := cfg
	c.TFConfig = tf(1)
	_, err := Run(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "cannot rejoin") {
		t.Fatalf("worker 1 started again: error %v, want one saying it cannot rejoin", err)
	}
	cancel()
	<-chief
}
