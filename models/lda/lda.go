// Package lda trains a latent Dirichlet allocation topic model by collapsed
// Gibbs sampling on a paramserv cluster, written on paramserv's public API
// only, as a user's program would be.
//
// The ps hold the model's counts: the word–topic table (a sparse table
// keyed by word id, one row of Topics counts per word) and the topic totals
// (a dense variable of Topics counts). Each worker owns its documents'
// topic assignments: it samples a batch of documents against the counts it
// last pulled (updated in place by its own moves), then pushes the batch's
// count deltas and pulls the rows of the next batch's words. Training is
// asynchronous, as in Yahoo!LDA: a push is applied as it comes.
//
// Counts stay exact integers on the ps, which hold float32 values: the
// update rule is sgd with learning rate 1 and each worker pushes minus its
// delta, so each push adds integers; float32 represents every integer up
// to 2^24 (16.7M) exactly, and no count exceeds the number of training
// tokens (Run refuses a corpus above 2^24 tokens). Synchronous training
// would average the deltas of a step (dividing by the number of workers),
// so it is not offered. Every worker's own counts are never negative, so
// neither is any sum of them that the ps holds.
//
// Held-out perplexity is by document completion: every HeldOut-th document
// is kept out of training; the even-numbered tokens of each are used to
// estimate its topic proportions (Perplexity's fixed point, with the
// topics fixed) and the odd-numbered ones are scored.
package lda

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv"
)

// Config is one worker's view of an LDA job; every worker gets the same.
type Config struct {
	// TFConfig is the cluster and this task in TF_CONFIG's form ("" reads
	// the environment variable).
	TFConfig string
	// Corpus is the documents in LDA-C format, one per line:
	// "N id:count id:count ..." with 0-based word ids. Vocab is the
	// vocabulary, one word per line (line i is word i); "" looks for
	// vocab.txt beside Corpus and goes without words if there is none.
	Corpus, Vocab string

	Topics      int     // K (20)
	Alpha, Beta float64 // the Dirichlet priors of the document–topic and topic–word distributions (0.1, 0.01)
	Sweeps      int     // Gibbs sweeps over every training token (300)
	BatchDocs   int     // documents sampled between two pushes (50)
	HeldOut     int     // document i is held out when i%HeldOut == HeldOut-1 (10)
	MaxDocs     int     // read only the first MaxDocs documents (0: all)
	Seed        int64
	TopWords    int // words listed per topic in the log (10)
	// LogEvery is how often, in sweeps, the chief logs the held-out
	// perplexity of the counts it sees (0: Sweeps/5).
	LogEvery int

	// ResultFile, if set, is where the chief writes the JSON summary:
	// perplexity, train_tokens, count_sum, topic_count_sum, ...
	ResultFile string
	Logf       func(format string, args ...any)
	// MetricsAddr is paramserv.Config's: where the worker serves its
	// metrics ("" reads PARAMSERV_METRICS_ADDR, "off" serves none).
	MetricsAddr string
}

func (c *Config) defaults() {
	if c.Topics <= 0 {
		c.Topics = 20
	}
	if c.Alpha <= 0 {
		c.Alpha = 0.1
	}
	if c.Beta <= 0 {
		c.Beta = 0.01
	}
	if c.Sweeps <= 0 {
		c.Sweeps = 300
	}
	if c.BatchDocs <= 0 {
		c.BatchDocs = 50
	}
	if c.HeldOut <= 0 {
		c.HeldOut = 10
	}
	if c.TopWords <= 0 {
		c.TopWords = 10
	}
	if c.LogEvery <= 0 {
		c.LogEvery = max(c.Sweeps/5, 1)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Doc is a document as word ids, one per token, in the corpus's order
// (each id:count pair expanded in place).
type Doc []int32

// Corpus is what ReadCorpus reads.
type Corpus struct {
	Docs  []Doc
	Vocab []string // may be empty
	V     int      // the number of distinct word ids (the vocabulary's length, if given)
}

// ReadCorpus reads an LDA-C file (and the vocabulary, if vocab is not
// ""), the first maxDocs documents of it (0: all). Errors name the file,
// line and token.
func ReadCorpus(path, vocab string, maxDocs int) (*Corpus, error) {
	c := &Corpus{}
	if vocab != "" {
		b, err := os.ReadFile(vocab)
		if err != nil {
			return nil, fmt.Errorf("lda: vocabulary: %w", err)
		}
		c.Vocab = strings.Fields(string(b))
		c.V = len(c.Vocab)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lda: corpus: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	maxID := -1
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if maxDocs > 0 && len(c.Docs) == maxDocs {
			break
		}
		bad := func(tok, why string) error {
			return fmt.Errorf("lda: %s:%d: token %q: %s (want LDA-C: N id:count ...)", path, line, tok, why)
		}
		n, err := strconv.Atoi(fields[0])
		if err != nil || n != len(fields)-1 {
			return nil, bad(fields[0], fmt.Sprintf("want the number of id:count pairs that follow, %d", len(fields)-1))
		}
		var d Doc
		for _, tok := range fields[1:] {
			a, b, ok := strings.Cut(tok, ":")
			id, err1 := strconv.Atoi(a)
			cnt, err2 := strconv.Atoi(b)
			switch {
			case !ok || err1 != nil || err2 != nil:
				return nil, bad(tok, "not id:count")
			case id < 0 || (c.V > 0 && id >= c.V):
				return nil, bad(tok, fmt.Sprintf("word id out of the vocabulary's range 0..%d", c.V-1))
			case cnt < 1:
				return nil, bad(tok, "count below 1")
			}
			maxID = max(maxID, id)
			for range cnt {
				d = append(d, int32(id))
			}
		}
		c.Docs = append(c.Docs, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lda: %s: %w", path, err)
	}
	if c.V == 0 {
		c.V = maxID + 1
	}
	if len(c.Docs) == 0 {
		return nil, fmt.Errorf("lda: %s: no documents", path)
	}
	return c, nil
}

// Split returns the training and held-out documents: document i is held
// out when i%every == every-1.
func (c *Corpus) Split(every int) (train, test []Doc) {
	for i, d := range c.Docs {
		if i%every == every-1 {
			test = append(test, d)
		} else {
			train = append(train, d)
		}
	}
	return train, test
}

// Names of the model's variables and table on the ps.
const (
	wordTopic  = "word_topic"
	topicCount = "topic_count"
	finished   = "finished"
	started    = "started" // per worker: how many times it started
)

// Result is what the chief measures at the end.
type Result struct {
	Perplexity  float64    // held-out, by document completion
	TrainTokens int64      // tokens of the training documents
	CountSum    int64      // sum of every word–topic count on the ps
	TopicSum    int64      // sum of the topic totals on the ps
	TopWords    [][]string // per topic (word ids as text without a vocabulary)
}

// Run runs one worker of the job until its sweeps are done; the chief
// then waits for every worker's last push, measures the model (Result,
// logged and written to ResultFile) and returns. A ps task is not run
// here: the ps are paramserv processes (or paramserv.ServePS).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	j := &job{cfg: cfg, start: time.Now()}
	if err := j.readCorpus(); err != nil {
		return nil, err
	}
	w, err := startWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	j.w = w
	for i, d := range j.train {
		if i%w.NumWorkers() == w.Index() {
			j.mine = append(j.mine, d)
		}
	}
	j.s = newSampler(cfg, j.corpus.V, j.mine, uint64(cfg.Seed), uint64(w.Index()))
	j.params, j.grads = w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, j.params); err != nil {
		return nil, err
	}
	if err := j.startOnce(ctx); err != nil {
		return nil, err
	}
	cfg.Logf("lda: worker %d of %d: %d of %d training documents (%d held out), %d words, %d topics, %d sweeps",
		w.Index(), w.NumWorkers(), len(j.mine), len(j.train), len(j.test), j.corpus.V, cfg.Topics, cfg.Sweeps)
	if err := j.sweeps(ctx); err != nil {
		return nil, err
	}
	// Say this worker's counts are all pushed: finished += 1.
	clear(j.grads[topicCount])
	j.grads[finished][0] = -1
	if _, err := w.PushPull(ctx, j.grads, j.params); err != nil {
		return nil, err
	}
	if !w.IsChief() {
		return nil, w.Done(ctx)
	}
	if err := j.waitFinished(ctx); err != nil {
		return nil, err
	}
	return j.report(ctx)
}

// job is one worker's part of an LDA job.
type job struct {
	cfg         Config
	start       time.Time
	corpus      *Corpus
	train, test []Doc
	trainTokens int64
	w           *paramserv.Worker
	mine        []Doc // this worker's documents
	s           *sampler
	params      paramserv.Params
	grads       paramserv.Params
}

// readCorpus reads the corpus (with the vocabulary beside it, if any),
// splits it into training and held-out documents, and checks that the
// ps's float32 counts hold the training tokens exactly.
func (j *job) readCorpus() error {
	vocab := j.cfg.Vocab
	if vocab == "" {
		if p := filepath.Join(filepath.Dir(j.cfg.Corpus), "vocab.txt"); fileExists(p) {
			vocab = p
		}
	}
	corpus, err := ReadCorpus(j.cfg.Corpus, vocab, j.cfg.MaxDocs)
	if err != nil {
		return err
	}
	j.corpus = corpus
	j.train, j.test = corpus.Split(j.cfg.HeldOut)
	for _, d := range j.train {
		j.trainTokens += int64(len(d))
	}
	if j.trainTokens >= 1<<24 {
		return fmt.Errorf("lda: %d training tokens: counts are float32 on the ps, exact only up to 2^24 = 16777216 tokens", j.trainTokens)
	}
	return nil
}

// startWorker starts this worker on the job's tables and variables and checks
// that the ps train asynchronously.
func startWorker(ctx context.Context, cfg Config) (*paramserv.Worker, error) {
	K := cfg.Topics
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  cfg.TFConfig,
		Tables:    []paramserv.Table{{Name: wordTopic, Dim: K}, {Name: started, Dim: 1}},
		Variables: []paramserv.Variable{{Name: topicCount, Shape: []int{K}}, {Name: finished, Shape: []int{1}}},
		// p -= 1*g: a push of -delta adds delta, exactly (see the package doc).
		Optimizer:   paramserv.Optimizer{Name: "sgd", LearningRate: 1},
		Logf:        cfg.Logf,
		MetricsAddr: cfg.MetricsAddr,
	}, paramserv.Params{topicCount: make([]float32, K), finished: {0}})
	if err != nil {
		return nil, err
	}
	if w.Sync() {
		w.Close()
		return nil, errors.New("lda: the ps train synchronously, which averages the count deltas of a step; LDA needs them summed (asynchronous training)")
	}
	return w, nil
}

// startOnce counts this worker's start on the ps and refuses a second:
// a worker's assignments live only in its memory, so one that started a
// second time would add its documents' counts twice.
func (j *job) startOnce(ctx context.Context) error {
	me := []uint64{uint64(j.w.Index())}
	if _, err := j.w.PushPullRows(ctx, j.grads, j.params, []paramserv.Rows{{Table: started, Keys: me, Values: []float32{-1}}}); err != nil {
		return err
	}
	times := []float32{0}
	if err := j.w.PullRows(ctx, started, me, times); err != nil {
		return err
	}
	if times[0] != 1 {
		return fmt.Errorf("lda: worker %d has started %v times: a worker cannot rejoin (its topic assignments were lost with it and its counts are on the ps); start the job again", j.w.Index(), times[0])
	}
	return nil
}

// sweeps runs the Gibbs sweeps over this worker's documents, a batch at a
// time: pull the batch's word rows, sample, push the count deltas. Sweep
// 0 only assigns topics at random. The chief logs the held-out perplexity
// every cfg.LogEvery sweeps.
func (j *job) sweeps(ctx context.Context) error {
	cfg, w, s, K := j.cfg, j.w, j.s, j.cfg.Topics
	var rows []float32
	for sweep := 0; sweep <= cfg.Sweeps; sweep++ {
		for b := 0; b < len(j.mine); b += cfg.BatchDocs {
			hi := min(b+cfg.BatchDocs, len(j.mine))
			keys := s.batchWords(b, hi)
			if sweep > 0 { // sweep 0 only assigns topics at random
				rows = grow(rows, len(keys)*K)
				if err := w.PullRows(ctx, wordTopic, keys, rows); err != nil {
					return err
				}
				s.setRows(keys, rows)
			}
			copyCounts(s.nk, j.params[topicCount])
			s.sample(b, hi, sweep == 0)
			delta := s.takeDelta(keys, j.grads[topicCount])
			if _, err := w.PushPullRows(ctx, j.grads, j.params, []paramserv.Rows{{Table: wordTopic, Keys: keys, Values: delta}}); err != nil {
				return err
			}
		}
		if w.IsChief() && sweep > 0 && (sweep%cfg.LogEvery == 0 && sweep < cfg.Sweeps) {
			phi, _, _, err := pullTopics(ctx, w, j.corpus.V, K, cfg.Beta)
			if err != nil {
				return err
			}
			p, _ := Perplexity(phi, j.test, cfg.Alpha)
			cfg.Logf("lda: sweep %d of %d: held-out perplexity %.1f (this worker's view; %s)", sweep, cfg.Sweeps, p, time.Since(j.start).Round(time.Millisecond))
		}
	}
	return nil
}

// waitFinished waits, pulling every 50 ms until ctx ends, for every
// worker to say its counts are all pushed.
func (j *job) waitFinished(ctx context.Context) error {
	for {
		f := j.params[finished][0]
		if f != float32(math.Trunc(float64(f))) {
			return fmt.Errorf("lda: the ps count %v finished workers, want a whole number: the counts are not exact", f)
		}
		if int(f) >= j.w.NumWorkers() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := j.w.Pull(ctx, j.params); err != nil {
			return err
		}
	}
}

// report is the chief's end of the job: the final topics and held-out
// perplexity, logged and written to cfg.ResultFile, with an error where
// the counts on the ps are not the training tokens.
func (j *job) report(ctx context.Context) (*Result, error) {
	cfg, w, K := j.cfg, j.w, j.cfg.Topics
	phi, countSum, topicSum, err := pullTopics(ctx, w, j.corpus.V, K, cfg.Beta)
	if err != nil {
		return nil, err
	}
	res := &Result{TrainTokens: j.trainTokens, CountSum: countSum, TopicSum: topicSum}
	res.Perplexity, _ = Perplexity(phi, j.test, cfg.Alpha)
	for k := range K {
		res.TopWords = append(res.TopWords, topWords(phi[k], j.corpus.Vocab, cfg.TopWords))
		cfg.Logf("lda: topic %2d: %s", k, strings.Join(res.TopWords[k], " "))
	}
	elapsed := time.Since(j.start)
	cfg.Logf("lda: after %d sweeps: held-out perplexity %.2f (document completion, %d held-out documents); counts on the ps: %d word-topic, %d topic totals, for %d training tokens; %s",
		cfg.Sweeps, res.Perplexity, len(j.test), countSum, topicSum, j.trainTokens, elapsed.Round(time.Millisecond))
	if countSum != j.trainTokens || topicSum != j.trainTokens {
		err = fmt.Errorf("lda: the ps hold %d word-topic counts and %d topic totals, want both %d (the training tokens)", countSum, topicSum, j.trainTokens)
	}
	if cfg.ResultFile != "" {
		if werr := paramserv.WriteResultFile(cfg.ResultFile, map[string]any{
			"model": "lda", "mode": "async", "perplexity": res.Perplexity, "perplexity_estimator": "document completion",
			"train_tokens": j.trainTokens, "count_sum": countSum, "topic_count_sum": topicSum,
			"topics": K, "sweeps": cfg.Sweeps, "train_docs": len(j.train), "test_docs": len(j.test),
			"global_step": w.Step(), "elapsed_s": elapsed.Seconds(),
			"tokens_per_s": float64(j.trainTokens) * float64(cfg.Sweeps+1) / elapsed.Seconds(),
		}); werr != nil && err == nil {
			err = werr
		}
	}
	if derr := w.Done(ctx); derr != nil && err == nil {
		err = derr
	}
	return res, err
}

// pullTopics reads the whole word–topic table and returns the topics'
// word distributions phi[k][v] = (n_vk + beta) / (n_k + V beta), with the
// sums of the counts. A count that is not a whole number is an error: the
// table must hold integers exactly.
func pullTopics(ctx context.Context, w *paramserv.Worker, V, K int, beta float64) (phi [][]float64, countSum, topicSum int64, err error) {
	keys := make([]uint64, V)
	for i := range keys {
		keys[i] = uint64(i)
	}
	rows := make([]float32, V*K)
	if err := w.PullRows(ctx, wordTopic, keys, rows); err != nil {
		return nil, 0, 0, err
	}
	params := w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		return nil, 0, 0, err
	}
	nk := make([]float64, K)
	for i, x := range rows {
		if x != float32(math.Trunc(float64(x))) || x < 0 {
			return nil, 0, 0, fmt.Errorf("lda: word %d topic %d holds count %v, want a whole number >= 0", i/K, i%K, x)
		}
		countSum += int64(x)
		nk[i%K] += float64(x)
	}
	for _, x := range params[topicCount] {
		topicSum += int64(x)
	}
	phi = make([][]float64, K)
	for k := range K {
		phi[k] = make([]float64, V)
		den := nk[k] + float64(V)*beta
		for v := range V {
			phi[k][v] = (float64(rows[v*K+k]) + beta) / den
		}
	}
	return phi, countSum, topicSum, nil
}

// Perplexity is the held-out perplexity of topics phi (phi[k][v], each
// row a distribution over the words) by document completion: in each
// document the even-numbered tokens estimate its topic proportions theta
// (100 iterations of theta_k = (alpha + sum_i r_ik) / (n + K alpha) with
// r_ik = theta_k phi_k(w_i) / sum_j theta_j phi_j(w_i), from theta
// uniform), and the odd-numbered tokens are scored:
// exp(-sum log sum_k theta_k phi_k(w) / their number). It returns the
// perplexity and the number of tokens scored. scripts/lda_sklearn.py
// computes the same for scikit-learn's topics.
func Perplexity(phi [][]float64, docs []Doc, alpha float64) (float64, int) {
	K := len(phi)
	theta, next, p := make([]float64, K), make([]float64, K), make([]float64, K)
	var ll float64
	var scored int
	for _, d := range docs {
		if len(d) < 2 {
			continue
		}
		nObs := (len(d) + 1) / 2
		for k := range theta {
			theta[k] = 1 / float64(K)
		}
		for range 100 {
			clear(next)
			for i := 0; i < len(d); i += 2 {
				var s float64
				for k := range K {
					p[k] = theta[k] * phi[k][d[i]]
					s += p[k]
				}
				for k := range K {
					next[k] += p[k] / s
				}
			}
			for k := range K {
				theta[k] = (alpha + next[k]) / (float64(nObs) + float64(K)*alpha)
			}
		}
		for i := 1; i < len(d); i += 2 {
			var s float64
			for k := range K {
				s += theta[k] * phi[k][d[i]]
			}
			ll += math.Log(s)
			scored++
		}
	}
	if scored == 0 {
		return math.NaN(), 0
	}
	return math.Exp(-ll / float64(scored)), scored
}

// sampler is one worker's collapsed Gibbs sampler over its documents.
type sampler struct {
	K, V        int
	alpha, beta float64
	docs        []Doc
	z           [][]int32 // topic of each token
	ndk         [][]int32 // per document, tokens per topic
	nwk         []int32   // V×K: the counts last pulled, plus this worker's moves since
	nk          []int32   // K: likewise
	dwk         map[int32][]int32
	dk          []int32 // topic totals' delta since the last push
	rng         *rand.Rand
	p           []float64
}

func newSampler(cfg Config, V int, docs []Doc, seed, worker uint64) *sampler {
	s := &sampler{K: cfg.Topics, V: V, alpha: cfg.Alpha, beta: cfg.Beta, docs: docs,
		nwk: make([]int32, V*cfg.Topics), nk: make([]int32, cfg.Topics), dk: make([]int32, cfg.Topics),
		dwk: map[int32][]int32{}, rng: rand.New(rand.NewPCG(seed, worker)), p: make([]float64, cfg.Topics)}
	s.z = make([][]int32, len(docs))
	s.ndk = make([][]int32, len(docs))
	for i, d := range docs {
		s.z[i] = make([]int32, len(d))
		s.ndk[i] = make([]int32, cfg.Topics)
	}
	return s
}

// batchWords returns the distinct words of documents [lo, hi), sorted.
func (s *sampler) batchWords(lo, hi int) []uint64 {
	seen := map[int32]bool{}
	var keys []uint64
	for _, d := range s.docs[lo:hi] {
		for _, v := range d {
			if !seen[v] {
				seen[v] = true
				keys = append(keys, uint64(v))
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// setRows takes the pulled rows of keys as this worker's counts.
func (s *sampler) setRows(keys []uint64, rows []float32) {
	K := s.K
	for i, key := range keys {
		copyCounts(s.nwk[int(key)*K:int(key+1)*K], rows[i*K:(i+1)*K])
	}
}

// sample moves every token of documents [lo, hi) to a topic drawn from
// its collapsed conditional (at random when init), counting the moves.
func (s *sampler) sample(lo, hi int, init bool) {
	K := s.K
	vbeta := float64(s.V) * s.beta
	for di := lo; di < hi; di++ {
		d, z, ndk := s.docs[di], s.z[di], s.ndk[di]
		for i, v := range d {
			row := s.nwk[int(v)*K : int(v+1)*K]
			var k int32
			if init {
				k = int32(s.rng.IntN(K))
			} else {
				old := z[i]
				ndk[old]--
				s.move(v, row, old, -1)
				var sum float64
				for t := range K {
					sum += (float64(ndk[t]) + s.alpha) * (float64(max(row[t], 0)) + s.beta) / (float64(max(s.nk[t], 0)) + vbeta)
					s.p[t] = sum
				}
				u := s.rng.Float64() * sum
				k = int32(sort.SearchFloat64s(s.p, u))
				if int(k) == K { // u == sum, by rounding
					k = int32(K - 1)
				}
			}
			z[i] = k
			ndk[k]++
			s.move(v, row, k, +1)
		}
	}
}

// move adds by to word v's count of topic k, here and in the delta.
func (s *sampler) move(v int32, row []int32, k, by int32) {
	row[k] += by
	s.nk[k] += by
	s.dk[k] += by
	d := s.dwk[v]
	if d == nil {
		d = make([]int32, s.K)
		s.dwk[v] = d
	}
	d[k] += by
}

// takeDelta returns minus the batch's word–topic deltas as rows of keys
// (every word of the batch), writes minus the topic totals' into dk, and
// clears both.
func (s *sampler) takeDelta(keys []uint64, dk []float32) []float32 {
	out := make([]float32, len(keys)*s.K)
	for i, key := range keys {
		if d := s.dwk[int32(key)]; d != nil {
			for k, x := range d {
				out[i*s.K+k] = -float32(x)
			}
		}
	}
	clear(s.dwk)
	for k, x := range s.dk {
		dk[k] = -float32(x)
	}
	clear(s.dk)
	return out
}

func copyCounts(dst []int32, src []float32) {
	for i, x := range src {
		dst[i] = int32(x)
	}
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// topWords returns the n most probable words of a topic.
func topWords(phi []float64, vocab []string, n int) []string {
	idx := make([]int, len(phi))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return phi[idx[a]] > phi[idx[b]] })
	var out []string
	for _, v := range idx[:min(n, len(idx))] {
		if v < len(vocab) {
			out = append(out, vocab[v])
		} else {
			out = append(out, strconv.Itoa(v))
		}
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
