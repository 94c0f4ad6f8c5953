package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/wire"
)

// A worker pulling dense values incrementally reads, after any sequence of
// pushes by several workers (plain pushes and push+pulls), and across a
// change of incarnation (as a restart or restore gives), bit for bit what a
// full pull reads at the same moment; and it reads fewer bytes doing so
// when some pulls follow no push.
func TestIncrementalDensePullEqualsFullPull(t *testing.T) {
	for _, numPS := range []int{1, 2} {
		for _, rule := range []string{"sgd", "adam"} {
			t.Run(fmt.Sprintf("ps=%d/%s", numPS, rule), func(t *testing.T) {
				testIncrementalDensePull(t, numPS, rule, uint64(numPS*7+len(rule)))
			})
		}
	}
}

func testIncrementalDensePull(t *testing.T, numPS int, rule string, seed uint64) {
	alwaysIncremental = true
	t.Cleanup(func() { alwaysIncremental = false })
	const workers = 3
	rounds := 80
	if testing.Short() {
		rounds = 40
	}
	addrs := startPS(t, numPS, workers)
	// Variables of several blocks, one of a part of a block, one larger
	// than a ps's part with two ps.
	vars := []model.Variable{
		{Name: "w", Shape: []int{3*wire.DenseBlock + 100}},
		{Name: "b", Shape: []int{5}},
		{Name: "e", Shape: []int{2, wire.DenseBlock}},
	}
	ctx := context.Background()
	var incrBytes, fullBytes atomic.Int64
	newClient := func(worker int, incr bool, n *atomic.Int64) *Client {
		opts := Options{Worker: worker, IncrementalPull: incr}
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
	full := newClient(1, false, &fullBytes)
	init := model.NewParams(vars)
	for i := range init["b"] {
		init["b"][i] = float32(math.Copysign(0, -1)) // -0: a -0 gradient makes it +0
	}
	if _, err := full.Init(ctx, init, InitOptions{Optimizer: optim.Config{Name: rule, LearningRate: 0.01}, NumWorkers: workers}); err != nil {
		t.Fatal(err)
	}
	incr := newClient(0, true, &incrBytes)
	other := newClient(2, false, nil)
	pushers := []*Client{incr, full, other}
	rng := rand.New(rand.NewPCG(seed, 5))
	// Gradients with whole blocks of +0 (which leave an SGD block as it
	// was) and of -0 (which do not, where a value is -0).
	negZero := float32(math.Copysign(0, -1))
	grads := func() model.Params {
		g := model.NewParams(vars)
		for _, v := range g {
			for b := 0; b < len(v); b += wire.DenseBlock {
				blk := v[b:min(b+wire.DenseBlock, len(v))]
				switch rng.IntN(8) {
				case 0, 1, 2:
				case 3:
					for i := range blk {
						blk[i] = negZero
					}
				default:
					for i := range blk {
						blk[i] = float32(rng.NormFloat64())
					}
				}
			}
		}
		return g
	}
	step := int64(0)
	// Bytes read by the pulls of rounds in which nothing changed since the
	// incremental worker's last pull: it must read next to nothing there.
	var quietIncr, quietFull, quietRounds int64
	for round := range rounds {
		what := fmt.Sprintf("round %d", round)
		quiet := false
		switch r := rng.IntN(10); {
		case round == 0: // a first pull of the initial values
		case round == 1:
			// -0 gradients to b, still -0, after a pull of it: it turns +0.
			g := model.NewParams(vars)
			for i := range g["b"] {
				g["b"][i] = negZero
			}
			if _, _, err := full.Push(ctx, step, g); err != nil {
				t.Fatalf("%s: push: %v", what, err)
			}
			step++
		case r < 4: // nothing changes before this pull
			quiet = true
		case r == 4:
			// As if the ps had restarted: the worker's values are of
			// another incarnation, and every block must come.
			for _, ds := range incr.dp.dense {
				if ds.since != 0 {
					ds.inc ^= 1
				}
			}
		default:
			for range 1 + rng.IntN(3) {
				w := pushers[rng.IntN(len(pushers))]
				if _, _, err := w.Push(ctx, step, grads()); err != nil {
					t.Fatalf("%s: push: %v", what, err)
				}
				step++
			}
		}
		got := model.NewParams(vars)
		req := &Request{Pull: true, Params: got}
		if round > 1 && rng.IntN(3) == 0 {
			req.Push, req.Step, req.Grads = true, step, grads()
			step++
			quiet = false
		}
		incr0 := incrBytes.Load()
		call := incr.Do(ctx, req)
		if call.Err != nil {
			t.Fatalf("%s: incremental pull: %v", what, call.Err)
		}
		full0 := fullBytes.Load()
		want := model.NewParams(vars)
		if _, err := full.Pull(ctx, 0, want); err != nil {
			t.Fatalf("%s: full pull: %v", what, err)
		}
		if quiet && round > 1 {
			quietIncr += incrBytes.Load() - incr0
			quietFull += fullBytes.Load() - full0
			quietRounds++
		}
		for name, w := range want {
			for i := range w {
				if math.Float32bits(got[name][i]) != math.Float32bits(w[i]) {
					t.Fatalf("%s: %s[%d]: incremental pull read %v, a full pull %v", what, name, i, got[name][i], w[i])
				}
			}
		}
	}
	t.Logf("bytes read: incremental %d, full %d; in %d rounds with no change, incremental %d, full %d",
		incrBytes.Load(), fullBytes.Load(), quietRounds, quietIncr, quietFull)
	if quietRounds == 0 {
		t.Fatal("no round without a change: the test's seed exercises nothing")
	}
	if quietIncr*10 > quietFull {
		t.Errorf("in %d rounds with no change the incremental worker read %d bytes, a full pull %d: want at most 10%%", quietRounds, quietIncr, quietFull)
	}
}

// A ps of data path version 2 (incremental sparse pulls only) refuses
// version 3; the worker dials again with version 2, pulls dense values in
// full and rows incrementally, with the same values.
func TestIncrementalDensePullFromVersion2PS(t *testing.T) {
	addrs := startPS(t, 1, 1)
	vars := []model.Variable{{Name: "w", Shape: []int{2*wire.DenseBlock + 3}}}
	tables := []model.Table{{Name: "emb", Dim: 2}}
	var refused, read atomic.Int64
	older := olderPSDial(&refused, wire.DataVersionIncremental)
	c, err := New(addrs, vars, Options{Tables: tables, IncrementalPull: true, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := older(ctx, addr)
		if err != nil {
			return nil, err
		}
		return countConn{nc, &read}, nil
	}})
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
	ones := model.NewParams(vars)
	for i := range ones["w"] {
		ones["w"][i] = 1
	}
	if _, _, err := c.Push(ctx, 0, ones); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got := model.NewParams(vars)
		before := read.Load()
		if _, err := c.Pull(ctx, 0, got); err != nil {
			t.Fatal(err)
		}
		for i, v := range got["w"] {
			if v != -1 {
				t.Fatalf("w[%d] = %v, want -1", i, v)
			}
		}
		if n := read.Load() - before; n < 4*int64(len(got["w"])) {
			t.Errorf("a pull read %d bytes from a version 2 ps, want the full %d of the values", n, 4*len(got["w"]))
		}
	}
	if refused.Load() != 3 {
		t.Errorf("the version 2 ps refused %d versions, want three (5, 4, 3)", refused.Load())
	}
	if p := c.dp.ps[0]; p.version.Load() != wire.DataVersionIncremental {
		t.Errorf("the client speaks version %d to a version 2 ps, want 2", p.version.Load())
	}
}

// A worker of another layout than the ps's pulling incrementally gets the
// layout error a full pull gives, not a malformed reply.
func TestIncrementalDensePullOfAnotherLayout(t *testing.T) {
	addrs := startPS(t, 1, 1)
	ctx := context.Background()
	mine := []model.Variable{{Name: "w", Shape: []int{3 * wire.DenseBlock}}}
	chief, err := New(addrs, mine, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer chief.Close()
	if _, err := chief.WaitReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := chief.Init(ctx, model.NewParams(mine), InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}); err != nil {
		t.Fatal(err)
	}
	other := []model.Variable{{Name: "w", Shape: []int{wire.DenseBlock}}}
	c, err := New(addrs, other, Options{IncrementalPull: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Pull(ctx, 0, model.NewParams(other))
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "the ps answered 3 dense blocks") || !strings.Contains(err.Error(), "w[49152]") {
		t.Fatalf("a pull of another layout: %v; want a layout error naming the block counts", err)
	}
}
