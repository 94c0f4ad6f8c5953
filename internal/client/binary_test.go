package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/server"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// cluster is n in-process ps on loopback. Each also accepts in-memory pipe
// connections (pipe), so that a test can route the data path through
// net.Pipe, where the race detector sees every byte copied.
type cluster struct {
	addrs []string
	lis   []*mixedListener
}

func startCluster(t *testing.T, n, workers int) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	c := &cluster{}
	for task := range n {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ml := newMixedListener(tl)
		c.addrs = append(c.addrs, tl.Addr().String())
		c.lis = append(c.lis, ml)
		s := server.New(server.Config{Task: task, NumPS: n, NumWorkers: workers})
		wg.Go(func() { server.ServeListener(ctx, ml, s) })
	}
	return c
}

// pipeDial makes the client's data path connect through pipes.
func (cl *cluster) pipeDial(c *Client) {
	for i, p := range c.dp.ps {
		ml := cl.lis[i]
		p.dial = func(ctx context.Context, _ string) (net.Conn, error) { return ml.dial(ctx) }
	}
}

// mixedListener accepts the TCP connections of its listener and pipes.
type mixedListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMixedListener(l net.Listener) *mixedListener {
	m := &mixedListener{Listener: l, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				m.once.Do(func() { close(m.done) })
				return
			}
			select {
			case m.conns <- c:
			case <-m.done:
				c.Close()
				return
			}
		}
	}()
	return m
}

func (m *mixedListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *mixedListener) Close() error {
	m.once.Do(func() { close(m.done) })
	return m.Listener.Close()
}

func (m *mixedListener) dial(ctx context.Context) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case m.conns <- s:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// twin is the same worker's client on the data path and on gRPC only,
// against two identical clusters.
type twin struct {
	fast, slow *Client
	send       bool // the data path's client makes its calls by Send
	vars       []model.Variable
	tables     []model.Table
}

func newTwin(t *testing.T, numPS int, vars []model.Variable, tables []model.Table, init InitOptions) *twin {
	t.Helper()
	return newTwinWith(t, numPS, vars, tables, init, Options{})
}

// newTwinWith is newTwin whose data path client has opts (its Tables,
// SplitBytes and GRPCOnly are newTwin's).
func newTwinWith(t *testing.T, numPS int, vars []model.Variable, tables []model.Table, init InitOptions, opts Options) *twin {
	t.Helper()
	tw := &twin{vars: vars, tables: tables}
	for _, grpcOnly := range []bool{false, true} {
		cl := startCluster(t, numPS, 1)
		o := Options{Tables: tables, SplitBytes: 64, GRPCOnly: grpcOnly}
		if !grpcOnly {
			o = opts
			o.Tables, o.SplitBytes = tables, 64
		}
		c, err := New(cl.addrs, vars, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctx := context.Background()
		if _, err := c.WaitReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Init(ctx, model.NewParams(vars), init); err != nil {
			t.Fatal(err)
		}
		if grpcOnly {
			tw.slow = c
		} else {
			tw.fast = c
		}
	}
	return tw
}

// do runs req (built twice, so that each client has its own buffers) on
// both, and fails on any difference in what they answer.
func (tw *twin) do(t *testing.T, what string, mk func() *Request) {
	t.Helper()
	ctx := context.Background()
	fr, sr := mk(), mk()
	var fc *Call
	if tw.send {
		fc = tw.fast.Send(ctx, fr)
		if !fc.Deferred() {
			t.Fatalf("%s: Send made a call that lands by itself", what)
		}
		_ = fc.Wait()
	} else {
		fc = tw.fast.Do(ctx, fr)
	}
	sc := tw.slow.Do(ctx, sr)
	if (fc.Err == nil) != (sc.Err == nil) || fc.Step != sc.Step || fc.Dropped != sc.Dropped {
		t.Fatalf("%s: data path: step %d dropped %v err %v; gRPC: step %d dropped %v err %v", what, fc.Step, fc.Dropped, fc.Err, sc.Step, sc.Dropped, sc.Err)
	}
	if fc.Err != nil {
		if errClass(fc.Err) != errClass(sc.Err) {
			t.Fatalf("%s: data path error %v, gRPC %v", what, fc.Err, sc.Err)
		}
		return
	}
	for name, v := range sr.Params {
		if !bitsEqual(fr.Params[name], v) {
			t.Fatalf("%s: variable %s differs:\n data path %v\n      gRPC %v", what, name, head(fr.Params[name]), head(v))
		}
	}
	for j := range sr.SparseParams {
		if !bitsEqual(fr.SparseParams[j].Values, sr.SparseParams[j].Values) {
			t.Fatalf("%s: rows of %s differ:\n data path %v\n      gRPC %v", what, sr.SparseParams[j].Table, head(fr.SparseParams[j].Values), head(sr.SparseParams[j].Values))
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func head(f []float32) []float32 { return f[:min(len(f), 12)] }

// The data path and gRPC give the same weights, steps, drops and counters
// for the same random pushes and pulls: dense variables split across ps
// and whole, sparse key sets used again (kept by the ps), new and shared
// between a push and its pull, with admission and eviction, for several
// rules, asynchronous and synchronous, with one and two ps.
func TestDataPathAgreesWithGRPC(t *testing.T) {
	vars := []model.Variable{{Name: "a", Shape: []int{30, 4}}, {Name: "b", Shape: []int{7}}}
	tables := []model.Table{{Name: "emb", Dim: 3, MinCount: 2, EvictAfterSteps: 6}, {Name: "lr", Dim: 1}}
	steps := 120
	if testing.Short() {
		steps = 50
	}
	for _, numPS := range []int{1, 2} {
		for _, rule := range []string{"sgd", "adam", "ftrl"} {
			for _, sync := range []bool{false, true} {
				t.Run(fmt.Sprintf("ps=%d/%s/sync=%v", numPS, rule, sync), func(t *testing.T) {
					tw := newTwin(t, numPS, vars, tables, InitOptions{
						Optimizer: optim.Config{Name: rule, LearningRate: 0.1}, Sync: sync, ReplicasToAggregate: 1, NumWorkers: 1,
					})
					runAgreement(t, tw, steps, uint64(numPS))
				})
			}
		}
	}
}

func runAgreement(t *testing.T, tw *twin, steps int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	pool := make([]uint64, 200)
	for i := range pool {
		pool[i] = rng.Uint64() >> rng.IntN(50)
	}
	keySet := func() []uint64 {
		perm := rng.Perm(len(pool))[:1+rng.IntN(60)]
		k := make([]uint64, len(perm))
		for i, p := range perm {
			k[i] = pool[p]
		}
		return k
	}
	family := [][]uint64{keySet(), keySet(), keySet(), pool[:50]} // used again and again
	pickKeys := func() []uint64 {
		if rng.IntN(3) == 0 {
			return keySet()
		}
		return family[rng.IntN(len(family))]
	}
	randGrads := func(n int) []float32 {
		g := make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		return g
	}
	step := int64(0)
	for i := range steps {
		// Draw the request once; build it per client from the draw.
		op := rng.IntN(3) // 0 push, 1 pull, 2 push+pull
		dense := rng.IntN(4) != 0
		grads := model.Params{}
		for _, v := range tw.vars {
			grads[v.Name] = randGrads(v.Size())
		}
		pushKeys, pullKeys := pickKeys(), pickKeys()
		if rng.IntN(2) == 0 {
			pullKeys = pushKeys
		}
		lrKeys := pickKeys()
		embGrads, lrGrads := randGrads(3*len(pushKeys)), randGrads(len(lrKeys))
		mk := func() *Request {
			r := &Request{Step: step}
			if op != 1 {
				r.Push = true
				if dense {
					r.Grads = grads
				}
				r.SparseGrads = []Rows{{Table: "emb", Keys: pushKeys, Values: embGrads}, {Table: "lr", Keys: lrKeys, Values: lrGrads}}
			}
			if op != 0 {
				r.Pull = true
				r.MinStep = step
				if dense {
					r.Params = model.NewParams(tw.vars)
				}
				r.SparseParams = []Rows{{Table: "emb", Keys: pullKeys, Values: make([]float32, 3*len(pullKeys))}, {Table: "lr", Keys: lrKeys, Values: make([]float32, len(lrKeys))}}
			}
			return r
		}
		tw.do(t, fmt.Sprintf("op %d (%d)", i, op), mk)
		if op != 1 {
			step++
		}
	}
	ctx := context.Background()
	fs, err1 := tw.fast.Status(ctx)
	ss, err2 := tw.slow.Status(ctx)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for i := range fs {
		f, s := fs[i], ss[i]
		if f.GlobalStep != s.GlobalStep || f.AppliedPushes != s.AppliedPushes || f.RejectedPushes != s.RejectedPushes || f.StaleDropped != s.StaleDropped {
			t.Fatalf("ps %d status: data path %v, gRPC %v", i, f, s)
		}
		for j := range f.Tables {
			ft, st := f.Tables[j], s.Tables[j]
			if ft.Rows != st.Rows || ft.Admitted != st.Admitted || ft.Evicted != st.Evicted || ft.RejectedByAdmission != st.RejectedByAdmission {
				t.Fatalf("ps %d table %s: data path %v, gRPC %v", i, ft.Name, ft, st)
			}
		}
	}
}

// Calls in flight at once on one client, each with its own params and rows,
// through pipes so the race detector sees every copy: no buffer is reused
// while a call that uses it is in flight, and every pull reads one step's
// values (gradients are uniform, so values within a variable are equal).
func TestConcurrentCallsShareNoBuffers(t *testing.T) {
	const n = 300_000 // large enough to be pipelined on the ps
	vars := []model.Variable{{Name: "w", Shape: []int{2, n / 2}}, {Name: "s", Shape: []int{3}}}
	tables := []model.Table{{Name: "emb", Dim: 4}}
	cl := startCluster(t, 2, 4)
	c, err := New(cl.addrs, vars, Options{Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.pipeDial(c)
	// A deadline, so that a call that never lands fails the test with a
	// message rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.WaitReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "momentum", LearningRate: 0.5}, NumWorkers: 4}); err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	rounds := 20
	if testing.Short() {
		rounds = 6
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			grads := model.NewParams(vars)
			for _, g := range grads {
				for i := range g {
					g[i] = 1
				}
			}
			rowGrads := make([]float32, 4*len(keys))
			for i := range rowGrads {
				rowGrads[i] = 1
			}
			for r := range rounds {
				params := model.NewParams(vars)
				rows := make([]float32, 4*len(keys))
				myKeys := keys
				if w%2 == 1 {
					myKeys = keys[w*100 : w*100+2000] // another key set
					rows = rows[:4*len(myKeys)]
				}
				calls := []*Call{
					c.DoAsync(ctx, &Request{Push: w != 1, Grads: grads, SparseGrads: []Rows{{Table: "emb", Keys: myKeys, Values: rowGrads[:4*len(myKeys)]}},
						Pull: true, Params: params, SparseParams: []Rows{{Table: "emb", Keys: myKeys, Values: rows}}}),
				}
				if r%2 == 0 {
					calls = append(calls, c.PushAsync(ctx, 0, grads))
				}
				for _, call := range calls {
					if err := call.Wait(); err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
				}
				for name, v := range params {
					for i := range v {
						if v[i] != v[0] {
							t.Errorf("worker %d: %s[%d] = %v but %s[0] = %v: a torn read", w, name, i, v[i], name, v[0])
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
}

// A ps that only speaks gRPC (an older one) makes the client use gRPC for
// pushes and pulls, at once and for good.
func TestFallsBackToGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(server.GRPCOptions()...)
	pb.RegisterParamServerServer(g, server.New(server.Config{NumWorkers: 1}))
	go g.Serve(lis)
	defer g.Stop()
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	var logs []string
	var mu sync.Mutex
	c, err := New([]string{lis.Addr().String()}, vars, Options{Logf: func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Init(ctx, model.Params{"w": {1, 2, 3}}, InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	params := model.NewParams(vars)
	if _, _, err := c.PushPull(ctx, 0, model.Params{"w": {1, 1, 1}}, 0, params); err != nil {
		t.Fatal(err)
	}
	if params["w"][2] != 2 || !c.dp.off.Load() {
		t.Fatalf("values %v, data path off %v", params["w"], c.dp.off.Load())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("falling back took %v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 1 || !strings.Contains(logs[0], "using gRPC") {
		t.Fatalf("logs %q", logs)
	}
}

// If the ps does not hold a key set the client thinks it does, the call
// sends the keys again and succeeds; nothing is applied twice. So does a
// call made by Send, which finds the miss in its Wait.
func TestCacheMissSendsKeysAgain(t *testing.T) {
	for _, send := range []bool{false, true} {
		t.Run(fmt.Sprintf("send=%v", send), func(t *testing.T) {
			c := sendClient(t, 1, Options{})
			ctx := context.Background()
			keys := []uint64{3, 1, 4, 1 << 40}
			grads := []float32{1, 1, 1, 1, 1, 1, 1, 1}
			vals := make([]float32, 8)
			push := func() {
				t.Helper()
				req := &Request{Push: true, SparseGrads: []Rows{{Table: "emb", Keys: keys, Values: grads}}, Pull: true, SparseParams: []Rows{{Table: "emb", Keys: keys, Values: vals}}}
				var call *Call
				if send {
					call = c.Send(ctx, req)
				} else {
					call = c.DoAsync(ctx, req)
				}
				if err := call.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			push()
			push() // by slot now
			// Make the client believe in a slot the ps never filled.
			d := c.dp.ps[0].idle[0]
			for s := range d.slot {
				if d.slot[s] != 0 {
					d.slot[(s+1)%wire.CacheSlots], d.slot[s] = d.slot[s], 0
				}
			}
			push()
			if vals[0] != -3 || vals[7] != -3 {
				t.Fatalf("rows %v after 3 pushes, want -3 each", vals)
			}
			st, err := c.Status(ctx)
			if err != nil || st[0].AppliedPushes != 3 || st[0].RejectedPushes != 0 {
				t.Fatalf("status %v %v", st, err)
			}
		})
	}
}

// With NoKeyCache every call sends its keys in full: no key set is kept
// in a cache slot of the ps, where the same calls with the cache name one.
func TestNoKeyCacheSendsKeysEveryCall(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		cl := startCluster(t, 1, 1)
		tables := []model.Table{{Name: "emb", Dim: 2}}
		c, err := New(cl.addrs, nil, Options{Tables: tables, NoKeyCache: noCache})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.Init(ctx, nil, InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
			t.Fatal(err)
		}
		keys := []uint64{3, 1, 4, 1 << 40}
		grads := []float32{1, 1, 1, 1, 1, 1, 1, 1}
		vals := make([]float32, 8)
		for range 3 {
			if call := c.Do(ctx, &Request{Push: true, SparseGrads: []Rows{{Table: "emb", Keys: keys, Values: grads}}, Pull: true, SparseParams: []Rows{{Table: "emb", Keys: keys, Values: vals}}}); call.Err != nil {
				t.Fatal(call.Err)
			}
		}
		if vals[0] != -3 || vals[7] != -3 {
			t.Fatalf("NoKeyCache %v: rows %v after 3 pushes, want -3 each", noCache, vals)
		}
		slots := 0
		for _, d := range c.dp.ps[0].idle {
			for _, u := range d.slot {
				if u != 0 {
					slots++
				}
			}
		}
		if (slots > 0) == noCache {
			t.Errorf("NoKeyCache %v: %d key cache slots in use", noCache, slots)
		}
	}
}

// A cancelled call waiting for a sync step returns the context's error,
// and the client goes on working.
func TestCancelWhileWaiting(t *testing.T) {
	cl := startCluster(t, 1, 2)
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	c, err := New(cl.addrs, vars, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, Sync: true, ReplicasToAggregate: 2, NumWorkers: 2}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	params := model.NewParams(vars)
	if _, err := c.Pull(wctx, 1, params); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pull of a step that never comes: %v, want DeadlineExceeded", err)
	}
	if _, err := c.Pull(ctx, 0, params); err != nil {
		t.Fatalf("next pull: %v", err)
	}
}

// gateConn holds a request's writes to one ps until the request to the
// other ps is being written too: if the client sent to the ps one after
// the other, the first write would wait for ever (here: fail after a
// while).
type gateConn struct {
	net.Conn
	gate *gate
}

type gate struct {
	once    sync.Once
	arrived chan struct{} // closed by the second conn to write
	mu      sync.Mutex
	n       int
}

func (c *gateConn) Write(p []byte) (int, error) {
	g := c.gate
	if len(p) > 1<<20 { // the gradient, not the preface
		g.mu.Lock()
		g.n++
		if g.n == 2 {
			g.once.Do(func() { close(g.arrived) })
		}
		g.mu.Unlock()
		select {
		case <-g.arrived:
		case <-time.After(20 * time.Second):
			return 0, fmt.Errorf("the other ps's share was not being sent at the same time")
		}
	}
	return c.Conn.Write(p)
}

// A dense push to two ps sends both shards at the same time.
func TestPushSendsShardsInParallel(t *testing.T) {
	cl := startCluster(t, 2, 1)
	vars := []model.Variable{{Name: "w", Shape: []int{2, 1 << 20}}} // 4 MiB a shard
	c, err := New(cl.addrs, vars, Options{SplitBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Init(ctx, model.NewParams(vars), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	g := &gate{arrived: make(chan struct{})}
	for i, p := range c.dp.ps {
		ml := cl.lis[i]
		p.dial = func(ctx context.Context, _ string) (net.Conn, error) {
			nc, err := ml.dial(ctx)
			return &gateConn{Conn: nc, gate: g}, err
		}
	}
	grads := model.NewParams(vars)
	if _, _, err := c.Push(ctx, 0, grads); err != nil {
		t.Fatal(err)
	}
}

// errClass is what a caller can tell of an error: its kind, and for an
// error of a ps without one, whether it is an invalid request, a failed
// step or another. The data path and gRPC must agree on it.
func errClass(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, ErrLayout):
		return "layout"
	case errors.Is(err, ErrVersion):
		return "version"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrNotReady):
		return "not ready"
	}
	var pe *psError
	if errors.As(err, &pe) {
		return fmt.Sprint(pe.kind)
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Sprint(wire.KindOfGRPCCode(uint32(st.Code())))
	}
	return "other"
}
