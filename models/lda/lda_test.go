package lda

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paramserv/paramserv"
	"github.com/paramserv/paramserv/internal/testutil"
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
	spec := fmt.Sprintf(`"cluster":{"ps":[%s],"worker":[%s]}`, join(ps), join(workers))
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

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// runJob trains cfg on a cluster of numPS ps and numWorkers workers in
// this process and returns the chief's result.
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

// unigramPerplexity is the held-out perplexity of the training documents'
// word frequencies (one topic), the floor any topic model must beat.
func unigramPerplexity(c *Corpus, beta float64) float64 {
	train, test := c.Split(10)
	phi := [][]float64{make([]float64, c.V)}
	var n float64
	for _, d := range train {
		for _, v := range d {
			phi[0][v]++
			n++
		}
	}
	for v := range phi[0] {
		phi[0][v] = (phi[0][v] + beta) / (n + float64(c.V)*beta)
	}
	p, _ := Perplexity(phi, test, 0.1)
	return p
}

// TestCountsExactAndTopicsLearnt trains a small LDA on the first 150 AP
// documents with 2 ps and 2 workers: the ps's counts must sum to the
// training tokens exactly, and the held-out perplexity must beat the
// unigram model's by a margin.
func TestCountsExactAndTopicsLearnt(t *testing.T) {
	dir := testutil.DataDir(t, "ap/ap.dat")
	corpus := filepath.Join(dir, "ap", "ap.dat")
	cfg := Config{Corpus: corpus, Topics: 8, Sweeps: 20, MaxDocs: 150, Seed: 1, LogEvery: 1000, Logf: t.Logf}
	res := runJob(t, cfg, 2, 2)
	if res.CountSum != res.TrainTokens || res.TopicSum != res.TrainTokens {
		t.Fatalf("counts on the ps: %d word-topic, %d topic totals; want both %d (training tokens)", res.CountSum, res.TopicSum, res.TrainTokens)
	}
	c, err := ReadCorpus(corpus, filepath.Join(dir, "ap", "vocab.txt"), 150)
	if err != nil {
		t.Fatal(err)
	}
	uni := unigramPerplexity(c, 0.01)
	t.Logf("held-out perplexity %.1f, unigram %.1f", res.Perplexity, uni)
	if !(res.Perplexity < 0.9*uni) {
		t.Fatalf("held-out perplexity %.1f, want below 0.9 × the unigram model's %.1f", res.Perplexity, uni)
	}
}

// TestPerplexityOfKnownTopics checks the estimator on topics whose answer
// is known: with one topic the estimate is the unigram perplexity; with two
// disjoint topics and documents drawn from one each, the completion finds
// the document's topic.
func TestPerplexityOfKnownTopics(t *testing.T) {
	uniform := [][]float64{{0.25, 0.25, 0.25, 0.25}}
	p, n := Perplexity(uniform, []Doc{{0, 1, 2, 3}, {3, 3}}, 0.1)
	if math.Abs(p-4) > 1e-12 || n != 3 {
		t.Fatalf("uniform over 4 words: perplexity %v over %d tokens, want 4 over 3", p, n)
	}
	two := [][]float64{{0.5, 0.5, 0, 0}, {0, 0, 0.5, 0.5}}
	p, _ = Perplexity(two, []Doc{{0, 1, 0, 1, 0, 1, 0, 1}, {2, 3, 2, 3, 2, 3, 2, 3}}, 0.01)
	if !(p > 2 && p < 2.05) {
		t.Fatalf("two disjoint topics: perplexity %v, want just above 2 (theta near one-hot)", p)
	}
}

func TestReadCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"2 1:1\n", `token "2"`},
		{"1 1:x\n", `token "1:x": not id:count`},
		{"1 7:1\n", "out of the vocabulary's range 0..2"},
		{"1 1:0\n", "count below 1"},
	} {
		path := filepath.Join(dir, "c.dat")
		writeFile(t, path, c.text)
		vocab := filepath.Join(dir, "v.txt")
		writeFile(t, vocab, "a\nb\nc\n")
		_, err := ReadCorpus(path, vocab, 0)
		if err == nil || !contains(err.Error(), c.want) || !contains(err.Error(), "c.dat:1") {
			t.Errorf("%q: error %v, want one naming c.dat:1 and %q", c.text, err, c.want)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestPerplexityAgreesWithTheScript scores the same topics on the first
// 100 AP documents here and with scripts/lda_sklearn.py --phi, which
// scores scikit-learn's topics: the two estimators must agree, so that the
// reference is measured as this model is.
func TestPerplexityAgreesWithTheScript(t *testing.T) {
	dir := testutil.DataDir(t, "ap/ap.dat")
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy, scipy").Run(); err != nil {
		t.Skipf("no /usr/bin/python3 with numpy and scipy: %v", err)
	}
	corpus := filepath.Join(dir, "ap", "ap.dat")
	c, err := ReadCorpus(corpus, filepath.Join(dir, "ap", "vocab.txt"), 100)
	if err != nil {
		t.Fatal(err)
	}
	_, test := c.Split(10)
	rng := rand.New(rand.NewPCG(1, 2))
	const K = 5
	phi := make([][]float64, K)
	var text strings.Builder
	for k := range phi {
		phi[k] = make([]float64, c.V)
		var sum float64
		for v := range phi[k] {
			phi[k][v] = rng.ExpFloat64()
			sum += phi[k][v]
		}
		for v := range phi[k] {
			phi[k][v] /= sum
			fmt.Fprintf(&text, "%.17g ", phi[k][v])
		}
		text.WriteString("\n")
	}
	phiFile := filepath.Join(t.TempDir(), "phi.txt")
	writeFile(t, phiFile, text.String())
	want, _ := Perplexity(phi, test, 0.1)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "lda_sklearn.py")
	out, err := exec.Command("/usr/bin/python3", script, "--corpus="+corpus, "--max_docs=100", "--alpha=0.1", "--phi="+phiFile).Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	var got struct{ Perplexity float64 }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	if math.Abs(got.Perplexity-want)/want > 1e-9 {
		t.Fatalf("perplexity of the same topics: the script %.12g, here %.12g", got.Perplexity, want)
	}
}

// sklearnAP is scikit-learn's held-out perplexity on AP at 20 topics, the
// best of the runs of scripts/lda_sklearn.py measured (Debian's
// python3-sklearn 1.2, batch variational Bayes, 100 iterations, its
// default priors 1/K; the estimator's alpha 0.1).
const sklearnAP = 3156.6

// TestFullAPWithinTenPercentOfSklearn trains the defaults (20 topics, 300
// sweeps) on the whole AP corpus with 2 ps and 2 workers: the perplexity
// must be at most 1.10 × scikit-learn's.
func TestFullAPWithinTenPercentOfSklearn(t *testing.T) {
	if testing.Short() {
		t.Skip("300 sweeps over 393k tokens: one to five minutes on a busy 2-core machine")
	}
	dir := testutil.DataDir(t, "ap/ap.dat")
	res := runJob(t, Config{Corpus: filepath.Join(dir, "ap", "ap.dat"), Seed: 1, Logf: t.Logf}, 2, 2)
	if res.CountSum != res.TrainTokens || res.TopicSum != res.TrainTokens {
		t.Fatalf("counts on the ps: %d word-topic, %d topic totals; want both %d (training tokens)", res.CountSum, res.TopicSum, res.TrainTokens)
	}
	if res.Perplexity > 1.10*sklearnAP {
		t.Fatalf("held-out perplexity %.1f, want ≤ 1.10 × scikit-learn's %.1f", res.Perplexity, sklearnAP)
	}
}

// TestRestartedWorkerRefused: a worker started a second time (its
// assignments lost, its counts on the ps) must refuse to go on rather than
// add its documents' counts twice.
func TestRestartedWorkerRefused(t *testing.T) {
	dir := testutil.DataDir(t, "ap/ap.dat")
	tf, _ := cluster(t, 1, 2)
	cfg := Config{Corpus: filepath.Join(dir, "ap", "ap.dat"), Topics: 4, Sweeps: 1 << 30, MaxDocs: 40, LogEvery: 1 << 30}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fails the test rather than hang it
	defer cancel()
	chief := make(chan error, 1)
	go func() {
		c := cfg
		c.TFConfig = tf(0)
		_, err := Run(ctx, c)
		chief <- err
	}()
	first, stop := context.WithCancel(ctx)
	sampling := make(chan struct{})
	var once sync.Once
	firstDone := make(chan error, 1)
	go func() {
		c := cfg
		c.TFConfig = tf(1)
		c.Logf = func(format string, args ...any) {
			if strings.HasPrefix(format, "lda: worker %d of %d") {
				once.Do(func() { close(sampling) })
			}
		}
		_, err := Run(first, c)
		firstDone <- err
	}()
	select {
	case <-sampling:
	case <-ctx.Done():
		t.Fatal("worker 1 never started sampling")
	}
	stop() // worker 1 dies
	<-firstDone
	c := cfg
	c.TFConfig = tf(1)
	_, err := Run(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "worker 1 has started 2 times") {
		t.Fatalf("worker 1 started again: error %v, want one saying it has started 2 times", err)
	}
	cancel()
	<-chief
}
