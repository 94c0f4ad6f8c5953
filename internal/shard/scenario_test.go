package shard

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/scenario"
)

// TestScenarios runs the shard's scripts in testdata/ through the project's
// one scenario driver (package scenario). Time is a fake clock that only
// "tick" moves. Commands:
//
//	new [ps=I] [of=N] workers=W                  a fresh shard (task I of N ps)
//	init sync|async [r=R] [workers=W] [step=S] [staleness=K] [timeout=D] [proceed] [opt=NAME] [lr=X] vars=w:2,b:1 [tables=emb:2,...]
//	                                             the chief's Init; variable values start 1, 2, 3, ...; tables start at zero
//	push W S [NAME=v,v...] [TABLE[k,k]=v,v...]   worker W pushes gradients computed at step S
//	tick D                                       the clock moves by D and the shard ticks
//	pull [min=S]                                 the values, or "not ready" while step < S
//	rows TABLE K...                              the rows of keys K
//	status                                       step, counters, incarnation changes
//	done W                                       worker W finished
//	snapshot                                     the tensors a checkpoint would hold
func TestScenarios(t *testing.T) {
	scenario.Run(t, func() scenario.Runner {
		var sh *Shard
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var inc uint64
		return func(t *testing.T, c scenario.Cmd) (string, error) {
			if c.Name != "new" && sh == nil {
				t.Fatalf("%s: %s before new", c.Where, c.Name)
			}
			switch c.Name {
			case "new":
				sh = New(Config{
					Task: int(c.Int(t, "ps", 0)), NumPS: int(c.Int(t, "of", 1)), NumWorkers: int(c.Int(t, "workers", 1)),
					Incarnation: func() uint64 { inc++; return inc },
				})
				return "", nil
			case "init":
				return scenarioInit(t, sh, c)
			case "push":
				p := Push{Worker: int(c.Arg(t, 0)), Step: c.Arg(t, 1)}
				for _, a := range c.Args[2:] {
					name, vals, ok := strings.Cut(a, "=")
					if !ok {
						t.Fatalf("%s: %q: want NAME=v,v or TABLE[k,k]=v,v", c.Where, a)
					}
					if tb, keys, ok := strings.Cut(name, "["); ok {
						p.Sparse = append(p.Sparse, SparseGrad{Table: []byte(tb), Keys: uints(t, c, strings.TrimSuffix(keys, "]")), Values: floats(t, c, vals), Bad: Unchecked})
						continue
					}
					p.Dense = append(p.Dense, DenseGrad{Name: []byte(name), Values: floats(t, c, vals), Bad: Unchecked})
				}
				for _, k := range sortedKeys(c.KV) { // NAME=v,v and TABLE[k,k]=v,v come as key=value
					v := c.KV[k]
					if tb, keys, ok := strings.Cut(k, "["); ok {
						p.Sparse = append(p.Sparse, SparseGrad{Table: []byte(tb), Keys: uints(t, c, strings.TrimSuffix(keys, "]")), Values: floats(t, c, v), Bad: Unchecked})
						continue
					}
					p.Dense = append(p.Dense, DenseGrad{Name: []byte(k), Values: floats(t, c, v), Bad: Unchecked})
				}
				if err := sh.Check(&p); err != nil {
					return "", kindErr(err)
				}
				res, err := sh.Apply(&p, now, nil)
				if err != nil {
					return "", kindErr(err)
				}
				return fmt.Sprintf("%s step=%d", res.Verdict, res.Step), nil
			case "tick":
				d, err := time.ParseDuration(c.Args[0])
				if err != nil {
					t.Fatalf("%s: %v", c.Where, err)
				}
				now = now.Add(d)
				before := sh.Version()
				sh.Tick(now)
				if sh.Version() == before {
					return "", nil
				}
				if err := sh.Failed(); err != nil {
					return "", kindErr(err)
				}
				return fmt.Sprintf("step=%d", sh.Step()), nil
			case "pull":
				if !sh.Initialized() {
					return "not initialised", nil
				}
				if err := sh.Failed(); err != nil {
					return "", kindErr(err)
				}
				if !sh.Ready(c.Int(t, "min", 0)) {
					return fmt.Sprintf("not ready: at step %d", sh.Step()), nil
				}
				var lines []string
				for _, v := range sh.Vars() {
					l := v.LeaseValues()
					lines = append(lines, fmt.Sprintf("%s=%v", v.Name(), l.Values()))
					l.Release()
				}
				return strings.Join(lines, " ") + fmt.Sprintf(" step=%d", sh.Step()), nil
			case "rows":
				dim, err := sh.TableDim([]byte(c.Args[0]))
				if err != nil {
					return "", kindErr(err)
				}
				keys := uints(t, c, strings.Join(c.Args[1:], ","))
				out := make([]float32, dim*len(keys))
				if err := sh.PullRows([]byte(c.Args[0]), keys, nil, false, out); err != nil {
					return "", kindErr(err)
				}
				var s []string
				for i, k := range keys {
					s = append(s, fmt.Sprintf("%d=%v", k, out[i*dim:(i+1)*dim]))
				}
				return strings.Join(s, " "), nil
			case "status":
				st := sh.Status()
				return fmt.Sprintf("step=%d applied=%d dropped=%d rejected=%d done=%d/%d incarnation=%d restored=%d",
					st.GlobalStep, st.AppliedPushes, st.StaleDropped, st.RejectedPushes, st.WorkersDone, st.NumWorkers, st.Incarnation, st.RestoredStep), nil
			case "done":
				all, err := sh.Done(int(c.Arg(t, 0)))
				if err != nil {
					return "", kindErr(err)
				}
				return fmt.Sprintf("all done: %v", all), nil
			case "snapshot":
				snap := sh.Snapshot()
				var lines []string
				for _, tn := range snap.Tensors {
					lines = append(lines, fmt.Sprintf("%s %s%v", tn.Name, tn.DType, tn.Shape))
				}
				return strings.Join(lines, "\n") + fmt.Sprintf("\nstep=%d meta=%v", snap.Step, snap.Meta), nil
			}
			t.Fatalf("%s: unknown command %q", c.Where, c.Name)
			return "", nil
		}
	})
}

func scenarioInit(t *testing.T, sh *Shard, c scenario.Cmd) (string, error) {
	l := Layout{
		Sync:                len(c.Args) > 0 && c.Args[0] == "sync",
		ReplicasToAggregate: int(c.Int(t, "r", 0)),
		NumWorkers:          int(c.Int(t, "workers", int64(sh.Config().NumWorkers))),
		GlobalStep:          c.Int(t, "step", 0),
		MaxStaleness:        c.Int(t, "staleness", 0),
		SyncProceed:         len(c.Args) > 1 && c.Args[1] == "proceed",
		Optimizer:           optim.Config{Name: "sgd", LearningRate: 0.5},
	}
	if n, ok := c.KV["opt"]; ok {
		l.Optimizer.Name = n
	}
	if lr, ok := c.KV["lr"]; ok {
		x, err := strconv.ParseFloat(lr, 64)
		if err != nil {
			t.Fatalf("%s: lr=%q", c.Where, lr)
		}
		l.Optimizer.LearningRate = x
	}
	if d, ok := c.KV["timeout"]; ok {
		var err error
		if l.SyncTimeout, err = time.ParseDuration(d); err != nil {
			t.Fatalf("%s: %v", c.Where, err)
		}
	}
	var values [][]float32
	next := float32(1)
	for _, v := range strings.Split(c.KV["vars"], ",") {
		if v == "" {
			continue
		}
		name, shape, _ := strings.Cut(v, ":")
		var dims []int64
		n := int64(1)
		for _, d := range strings.Split(shape, "x") {
			x, err := strconv.ParseInt(d, 10, 64)
			if err != nil {
				t.Fatalf("%s: shape %q", c.Where, shape)
			}
			dims = append(dims, x)
			n *= x
		}
		l.Vars = append(l.Vars, VarSpec{Name: name, Shape: dims})
		vals := make([]float32, max(0, min(n, 1<<10)))
		for i := range vals {
			vals[i] = next
			next++
		}
		values = append(values, vals)
	}
	for _, tb := range strings.Split(c.KV["tables"], ",") {
		if tb == "" {
			continue
		}
		name, dim, _ := strings.Cut(tb, ":")
		d, _ := strconv.Atoi(dim)
		l.Tables = append(l.Tables, TableSpec{Name: name, Dim: int32(d)})
	}
	already, err := sh.Init(l, values)
	if err != nil {
		return "", kindErr(err)
	}
	if already {
		return fmt.Sprintf("already initialised at step %d", sh.Step()), nil
	}
	return "", nil
}

// kindErr prefixes an error of the shard with its kind, so scripts show
// what a front end would map it to.
func kindErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return fmt.Errorf("%s: %s", e.Kind, e.Msg)
	}
	return err
}

func floats(t *testing.T, c scenario.Cmd, s string) []float32 {
	var out []float32
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		switch f {
		case "nan":
			out = append(out, float32(nan()))
			continue
		}
		x, err := strconv.ParseFloat(f, 32)
		if err != nil {
			t.Fatalf("%s: value %q", c.Where, f)
		}
		out = append(out, float32(x))
	}
	return out
}

func nan() float64 { z := 0.0; return z / z }

func uints(t *testing.T, c scenario.Cmd, s string) []uint64 {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("%s: key %q", c.Where, f)
		}
		out = append(out, x)
	}
	return out
}

// sortedKeys returns a map's keys in order, so that key=value arguments
// push in a stable order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
