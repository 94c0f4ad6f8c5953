package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/wire"
)

// countConn counts the bytes a client reads.
type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func countingDial(n *atomic.Int64) func(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countConn{nc, n}, nil
	}
}

// A worker pulling incrementally sees, after any sequence of pushes by
// several workers (with admission and eviction on the table), bit for bit
// what a full pull of the same keys reads at the same moment; and it reads
// fewer bytes doing so.
func TestIncrementalPullEqualsFullPull(t *testing.T) {
	for _, numPS := range []int{1, 2} {
		for _, dim := range []int{1, 3} {
			t.Run(fmt.Sprintf("ps=%d/dim=%d", numPS, dim), func(t *testing.T) {
				testIncrementalPull(t, numPS, dim, uint64(numPS*10+dim))
			})
		}
	}
}

func testIncrementalPull(t *testing.T, numPS, dim int, seed uint64) {
	alwaysIncremental = true
	t.Cleanup(func() { alwaysIncremental = false })
	const workers, keySpace = 3, 400
	rounds := 300
	if testing.Short() {
		rounds = 120
	}
	addrs := startPS(t, numPS, workers)
	vars := []model.Variable{{Name: "b", Shape: []int{2}}}
	tables := []model.Table{
		{Name: "emb", Dim: dim, Init: "normal", InitStddev: 0.1, Seed: 7, MinCount: 2, EvictAfterSteps: 20},
		// sgd keeps no state: pushes to rows created together update
		// them in place, in runs.
		{Name: "plain", Dim: 2, Optimizer: &optim.Config{Name: "sgd", LearningRate: 0.1}},
	}
	ctx := context.Background()
	var incrBytes, fullBytes atomic.Int64
	newClient := func(worker int, incr bool, n *atomic.Int64) *Client {
		opts := Options{Worker: worker, Tables: tables, IncrementalPull: incr}
		if n != nil {
			opts.Dial = countingDial(n)
		}
		c, err := New(addrs, vars, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.WaitReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		return c
	}
	incr := newClient(0, true, &incrBytes)
	// FTRL with a strong L1 keeps many weights at 0 while their state
	// changes: rows updated but not changed.
	opt := optim.Config{Name: "adagrad", LearningRate: 0.1}
	if dim == 1 {
		opt = optim.Config{Name: "ftrl", LearningRate: 0.1, L1: 2}
	}
	if _, err := incr.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: opt, NumWorkers: workers}); err != nil {
		t.Fatal(err)
	}
	full := newClient(1, false, &fullBytes)
	other := newClient(2, false, nil)
	pushers := []*Client{incr, full, other}

	rng := rand.New(rand.NewPCG(seed, 99))
	// Skewed keys: small ones far more often.
	randKeys := func(n int) []uint64 {
		seen := map[uint64]bool{}
		var keys []uint64
		for len(keys) < n {
			k := uint64(rng.ExpFloat64() * keySpace / 6)
			if k >= keySpace || seen[k] {
				continue
			}
			seen[k] = true
			keys = append(keys, k)
		}
		return keys
	}
	grads := func(keys []uint64, d int) []float32 {
		g := make([]float32, len(keys)*d)
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		return g
	}
	dims := map[string]int{"emb": dim, "plain": 2}
	var lastKeys []uint64
	step := int64(0)
	compare := func(what string, keys []uint64, got []float32, table string) {
		t.Helper()
		want := make([]float32, len(got))
		if _, err := full.PullRows(ctx, 0, table, keys, want); err != nil {
			t.Fatalf("%s: full pull: %v", what, err)
		}
		for i := range got {
			if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
				k := keys[i/dims[table]]
				t.Fatalf("%s: table %q key %d: incremental pull read %v, a full pull %v", what, table, k, got[i], want[i])
			}
		}
	}
	for round := range rounds {
		// A few pushes by random workers to random keys.
		for range 1 + rng.IntN(3) {
			w := pushers[rng.IntN(len(pushers))]
			keys := randKeys(1 + rng.IntN(30))
			table := "emb"
			if rng.IntN(4) == 0 {
				table = "plain"
			}
			if _, _, err := w.PushRows(ctx, step, table, keys, grads(keys, dims[table])); err != nil {
				t.Fatal(err)
			}
			step++
		}
		// An incremental pull: a fresh key set, or the last one again (a
		// key set the ps keeps), or a push+pull of the same keys.
		keys := randKeys(1 + rng.IntN(60))
		if lastKeys != nil && rng.IntN(3) == 0 {
			keys = lastKeys
		}
		lastKeys = keys
		got := make([]float32, len(keys)*dim)
		what := fmt.Sprintf("round %d", round)
		switch rng.IntN(4) {
		case 0:
			call := incr.Do(ctx, &Request{Push: true, Pull: true, Step: step,
				SparseGrads:  []Rows{{Table: "emb", Keys: keys, Values: grads(keys, dim)}},
				SparseParams: []Rows{{Table: "emb", Keys: keys, Values: got}}})
			if call.Err != nil {
				t.Fatalf("%s: push+pull: %v", what, call.Err)
			}
			step++
		case 1:
			pg := make([]float32, len(keys)*2)
			call := incr.Do(ctx, &Request{Push: true, Pull: true, Step: step,
				SparseGrads:  []Rows{{Table: "plain", Keys: keys, Values: grads(keys, 2)}},
				SparseParams: []Rows{{Table: "plain", Keys: keys, Values: pg}, {Table: "emb", Keys: keys, Values: got}}})
			if call.Err != nil {
				t.Fatalf("%s: push+pull: %v", what, call.Err)
			}
			step++
			compare(what+" (table plain)", keys, pg, "plain")
		default:
			pk := slices.Clone(keys)
			pg := make([]float32, len(pk)*2)
			call := incr.Do(ctx, &Request{Pull: true, SparseParams: []Rows{
				{Table: "emb", Keys: keys, Values: got},
				{Table: "plain", Keys: pk, Values: pg},
			}})
			if call.Err != nil {
				t.Fatalf("%s: pull: %v", what, call.Err)
			}
			compare(what+" (table plain)", pk, pg, "plain")
		}
		compare(what, keys, got, "emb")
	}
	// The full client also pulled everything the incremental one did (and
	// pushed as much), so it read at least as much; the incremental one
	// must have read clearly less.
	t.Logf("bytes read: incremental %d, full %d", incrBytes.Load(), fullBytes.Load())
	if incrBytes.Load()*10 > fullBytes.Load()*9 {
		t.Errorf("the incremental worker read %d bytes, the full one %d: want at most 90%%", incrBytes.Load(), fullBytes.Load())
	}
}

// A worker whose pulls send nearly every row anyway stops asking for a
// while, longer each time, and asks again once a window saves.
func TestIncrementalPullBacksOff(t *testing.T) {
	s := newRowStore()
	wasted := func() {
		for range incrWindow {
			if !s.want() {
				t.Fatal("want false inside a window")
			}
			s.tally(100, 95)
			s.mu.Unlock()
		}
	}
	fulls := func() int {
		n := 0
		for !s.want() {
			n++
		}
		s.mu.Unlock()
		return n
	}
	wasted()
	if n := fulls(); n != incrWindow {
		t.Errorf("after one wasted window: %d full pulls, want %d", n, incrWindow)
	}
	wasted()
	if n := fulls(); n != 2*incrWindow {
		t.Errorf("after two wasted windows: %d full pulls, want %d", n, 2*incrWindow)
	}
	for range incrWindow {
		if !s.want() {
			t.Fatal("want false inside a window")
		}
		s.tally(100, 50)
		s.mu.Unlock()
	}
	wasted()
	if n := fulls(); n != incrWindow {
		t.Errorf("after a saving window and a wasted one: %d full pulls, want %d", n, incrWindow)
	}
}

// oldPSDial dials the ps through a stand-in for an older ps, which
// refuses data path versions above 1 as one would (a hello with status 1,
// then the connection closes), and counts the refusals.
func oldPSDial(refused *atomic.Int64) func(ctx context.Context, addr string) (net.Conn, error) {
	return olderPSDial(refused, wire.DataVersion)
}

// olderPSDial is oldPSDial for a ps that speaks versions up to top.
func olderPSDial(refused *atomic.Int64, top int) func(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) {
		real, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		mine, theirs := net.Pipe()
		go func() {
			defer real.Close()
			defer theirs.Close()
			var head [4]byte
			if _, err := io.ReadFull(theirs, head[:]); err != nil {
				return
			}
			if string(head[:]) == wire.DataMagic {
				pre := make([]byte, wire.PrefaceLen)
				copy(pre, head[:])
				if _, err := io.ReadFull(theirs, pre[4:]); err != nil {
					return
				}
				if v, _ := wire.CheckPreface(pre); v > top {
					refused.Add(1)
					var h [wire.HelloLen]byte
					wire.Hello{Version: wire.DataVersion, Status: wire.HelloBadVersion}.Put(h[:])
					_, _ = theirs.Write(h[:])
					return
				}
				head = [4]byte{}
				if _, err := real.Write(pre); err != nil {
					return
				}
			} else if _, err := real.Write(head[:]); err != nil {
				return
			}
			go func() { _, _ = io.Copy(theirs, real); theirs.Close() }()
			_, _ = io.Copy(real, theirs)
		}()
		return mine, nil
	}
}

// A ps that does not speak incremental pulls refuses the version; the
// worker dials again and pulls in full, with the same values.
func TestIncrementalPullFromOlderPS(t *testing.T) {
	addrs := startPS(t, 1, 1)
	vars := []model.Variable{{Name: "b", Shape: []int{1}}}
	tables := []model.Table{{Name: "emb", Dim: 2}}
	var refused atomic.Int64
	c, err := New(addrs, vars, Options{Tables: tables, IncrementalPull: true, Dial: oldPSDial(&refused)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.WaitReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	keys := []uint64{1, 2, 3}
	for step := range int64(3) {
		if _, _, err := c.PushRows(ctx, step, "emb", keys, []float32{1, 1, 1, 1, 1, 1}); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 6)
		if _, err := c.PullRows(ctx, 0, "emb", keys, got); err != nil {
			t.Fatal(err)
		}
		for _, v := range got {
			if v != -float32(step+1) {
				t.Fatalf("step %d: pulled %v, want every value %v", step, got, -float32(step+1))
			}
		}
	}
	if refused.Load() != 4 {
		t.Errorf("the older ps refused a version %d times, want four times (5, 4, 3, then 2; the client then asks for version 1)", refused.Load())
	}
	if c.dp.off.Load() {
		t.Error("the client turned the data path off")
	}
}

// The worker's index of the rows it keeps finds every key added, through
// its growth, and no other.
func TestHeldTableIndex(t *testing.T) {
	var h heldTable
	h.dim = 1
	const n = 5000
	for i := range uint64(n) {
		key := i * 0x9e3779b97f4a7c15 // spread, and one is 0
		if r := h.add(key, []float32{float32(i)}); r != int32(i) {
			t.Fatalf("key %d got row %d, want %d", key, r, i)
		}
	}
	for i := range uint64(n) {
		key := i * 0x9e3779b97f4a7c15
		if r := h.find(key); r != int32(i) || h.vals[r] != float32(i) {
			t.Fatalf("key %d: row %d, want %d", key, r, i)
		}
		if r := h.find(key + 1); r >= 0 {
			t.Fatalf("key %d, never added, found at row %d", key+1, r)
		}
	}
}

// A worker without incremental pulls asks an older ps (of versions up to
// 3, whose error replies carry status codes) for version 4 once, then for
// version 1; it keeps no key sets there, since such a ps's error replies
// do not tell a cache miss from a restore, and its calls land as before.
func TestDataPathToOlderPS(t *testing.T) {
	addrs := startPS(t, 1, 1)
	tables := []model.Table{{Name: "emb", Dim: 2}}
	var refused atomic.Int64
	c, err := New(addrs, nil, Options{Tables: tables, Dial: olderPSDial(&refused, wire.DataVersionDenseIncremental)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.PullRows(ctx, 0, "emb", []uint64{1}, make([]float32, 2)); !errors.Is(err, ErrNotReady) {
		t.Fatalf("pull before Init: %v, want ErrNotReady", err)
	}
	if _, err := c.Init(ctx, nil, InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	keys := []uint64{1, 2, 3}
	for step := range int64(3) {
		if _, _, err := c.PushRows(ctx, step, "emb", keys, []float32{1, 1, 1, 1, 1, 1}); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 6)
		if _, err := c.PullRows(ctx, 0, "emb", keys, got); err != nil {
			t.Fatal(err)
		}
		if got[0] != -float32(step+1) || got[5] != -float32(step+1) {
			t.Fatalf("step %d: pulled %v", step, got)
		}
	}
	if _, _, err := c.PushRows(ctx, 3, "nope", keys, make([]float32, 6)); err == nil || Retryable(err) {
		t.Fatalf("push to an unknown table: %v, want an error that is not retryable", err)
	}
	p := c.dp.ps[0]
	if refused.Load() != 2 || p.version.Load() != wire.DataVersion {
		t.Errorf("refused %d versions, speaks version %d; want two refusals (5, 4), then version 1", refused.Load(), p.version.Load())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.idle {
		if d.slot != [wire.CacheSlots]uint64{} {
			t.Errorf("the client kept key sets %v on an older ps", d.slot)
		}
	}
	if c.dp.off.Load() {
		t.Error("the client turned the data path off")
	}
}
