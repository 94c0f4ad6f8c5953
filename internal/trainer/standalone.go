package trainer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/parallel/goroutines"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// psClient is what the training loops and the chief's evaluation ask of
// the ps: a *client.Client, or a localPS in the same process (standalone).
type psClient interface {
	Pull(ctx context.Context, minStep int64, params model.Params) (int64, error)
	PushPullAsync(ctx context.Context, step int64, grads model.Params, minStep int64, params model.Params) *client.Call
	Do(ctx context.Context, req *client.Request) *client.Call
	DoAsync(ctx context.Context, req *client.Request) *client.Call
	Send(ctx context.Context, req *client.Request) *client.Call
	Status(ctx context.Context) ([]*pb.StatusResponse, error)
	PullRows(ctx context.Context, minStep int64, table string, keys []uint64, values []float32) (int64, error)
}

var _ psClient = (*client.Client)(nil)

// localPS is a standalone job's ps: one shard (the ps's own state machine,
// with its update rules, tables and tracker) driven directly, with no
// server, socket or copy to a wire. A call runs to the end before it
// returns, in the worker's goroutine; only Start (a sparse model's step)
// runs on a goroutine of its own, one at a time, which every other call
// waits for.
type localPS struct {
	sh     *shard.Shard
	vars   []model.Variable
	names  [][]byte // vars' names
	tables map[string][]byte
	push   shard.Push
	// pulled holds, per table, the keys of its last pull with the rows
	// they were found at: the next push of the same keys (sparseLoop
	// pushes the gradients of the batch whose rows it pulled) reuses
	// them, as a ps does with a worker's cached key set, instead of
	// looking every key up again. reused counts such pushes.
	pulled map[string]*sparse.KeySet
	reused int
	// keyCopies are Start's copies of the keys to pull, in two sets used
	// in turn: one may still be the keys of the call in flight.
	keyCopies [2][][]uint64
	turn      int
	// ahead holds, per table, the key set of the batch after the one
	// pulled last, its rows looked up by Start's goroutine after the
	// pull while the model computed (see Start); a pull of the same keys
	// takes it. handoff carries those keys (copied into handed) to the
	// goroutine; idle is closed when the goroutine has ended, and every
	// call waits for it first (settle).
	ahead   map[string]*sparse.KeySet
	handed  []client.Rows
	handoff chan []client.Rows
	idle    chan struct{}
	waiting bool // a goroutine of Start waits for Ahead
}

// newLocalPS builds and initialises a one-worker shard holding every
// variable whole and every table, as the chief's Init would.
func newLocalPS(cfg Config, vars []model.Variable, tables []model.Table, init model.Params) (*localPS, error) {
	sh := shard.New(shard.Config{
		NumPS: 1, NumWorkers: 1, Logf: cfg.Logf,
		// The ps's own spread of a large update over the cores.
		Update: func(r optim.Rule, param, grad []float32, state [][]float32, step int64) {
			optim.ApplyParallel(r, param, grad, state, step, goroutines.OnCores())
		},
		Parallel: goroutines.OnCores(),
	})
	l := shard.Layout{
		Optimizer: cfg.Optimizer, Sync: cfg.Sync, ReplicasToAggregate: 1, NumWorkers: 1,
		MaxStaleness: cfg.MaxStaleness, SplitBytes: int64(cfg.SplitBytes),
	}
	p := &localPS{sh: sh, vars: vars, tables: map[string][]byte{}, pulled: map[string]*sparse.KeySet{},
		ahead: map[string]*sparse.KeySet{}, handoff: make(chan []client.Rows, 1)}
	values := make([][]float32, len(vars))
	for i, v := range vars {
		shape := make([]int64, len(v.Shape))
		for j, d := range v.Shape {
			shape[j] = int64(d)
		}
		l.Vars = append(l.Vars, shard.VarSpec{Name: v.Name, Shape: shape, Optimizer: v.Optimizer})
		values[i] = init[v.Name]
		p.names = append(p.names, []byte(v.Name))
	}
	for _, t := range tables {
		l.Tables = append(l.Tables, shard.TableSpec{
			Name: t.Name, Dim: int32(t.Dim), Initializer: t.Init, InitStddev: t.InitStddev, Seed: t.Seed,
			MinCount: t.MinCount, EvictAfterSteps: t.EvictAfterSteps, Optimizer: t.Optimizer,
		})
		p.tables[t.Name] = []byte(t.Name)
	}
	if _, err := sh.Init(l, values); err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("standalone: %w", err)}
	}
	return p, nil
}

func (p *localPS) Pull(ctx context.Context, minStep int64, params model.Params) (int64, error) {
	call := p.Do(ctx, &client.Request{Pull: true, MinStep: minStep, Params: params})
	return call.Step, call.Err
}

func (p *localPS) PushPullAsync(ctx context.Context, step int64, grads model.Params, minStep int64, params model.Params) *client.Call {
	return p.Do(ctx, &client.Request{Push: true, Step: step, Grads: grads, Pull: true, MinStep: minStep, Params: params})
}

func (p *localPS) DoAsync(ctx context.Context, req *client.Request) *client.Call {
	return p.Do(ctx, req)
}

func (p *localPS) Send(ctx context.Context, req *client.Request) *client.Call {
	return p.Do(ctx, req)
}

// Do applies the push, then reads the pull, as one ps would.
func (p *localPS) Do(ctx context.Context, req *client.Request) *client.Call {
	p.settle()
	done := make(chan struct{})
	close(done)
	call := &client.Call{Done: done}
	if err := stopped(ctx); err != nil {
		// No ps to see the context end: the loop learns of it here, as a
		// worker does from its calls (SIGTERM, Ctrl-C).
		call.Err = err
		return call
	}
	call.Err = p.do(req, call)
	return call
}

// stopped is ctx's cause once ctx has ended, else nil; cheap enough for
// every step.
func stopped(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("standalone: stopped: %w", context.Cause(ctx))
	default:
		return nil
	}
}

func (p *localPS) do(req *client.Request, call *client.Call) error {
	if req.Push {
		push := &p.push
		*push = shard.Push{Step: req.Step, Dense: push.Dense[:0], Sparse: push.Sparse[:0]}
		if req.Grads != nil {
			for i, v := range p.vars {
				g, ok := req.Grads[v.Name]
				if !ok {
					continue
				}
				push.Dense = append(push.Dense, shard.DenseGrad{Name: p.names[i], Values: g, Bad: shard.Unchecked})
			}
		}
		for _, r := range req.SparseGrads {
			g := shard.SparseGrad{Table: p.tableName(r.Table), Keys: r.Keys, Values: r.Values, Bad: shard.Unchecked}
			if ks := p.pulled[r.Table]; ks != nil && slices.Equal(ks.Keys(), r.Keys) {
				g.Keys, g.Set = nil, ks
				p.reused++
			}
			push.Sparse = append(push.Sparse, g)
		}
		if err := p.sh.Check(push); err != nil {
			return err
		}
		res, err := p.sh.Apply(push, time.Now(), nil)
		if err != nil {
			return err
		}
		call.Step, call.Dropped = res.Step, res.Dropped()
	}
	if !req.Pull {
		return nil
	}
	if !p.sh.Ready(req.MinStep) {
		// One worker: a step it waits for can only come from itself.
		return fmt.Errorf("standalone: a pull waits for global step %d, the step is %d", req.MinStep, p.sh.Step())
	}
	if req.Params != nil {
		for _, v := range p.vars {
			dst, ok := req.Params[v.Name]
			if !ok {
				continue
			}
			lease := p.sh.Var(v.Name).LeaseValues()
			copy(dst, lease.Values())
			lease.Release()
		}
	}
	for _, r := range req.SparseParams {
		// A copy of the keys: the caller may reuse its slice before the
		// push that names them again.
		ks := p.pulled[r.Table]
		if a := p.ahead[r.Table]; a != nil && slices.Equal(a.Keys(), r.Keys) {
			// Looked up ahead (Start): the set pulled before is free
			// again, for the next batch's keys.
			p.pulled[r.Table], p.ahead[r.Table] = a, ks
			ks = a
		} else {
			if ks == nil {
				ks = &sparse.KeySet{}
				p.pulled[r.Table] = ks
			}
			ks.Reset(append(ks.Keys()[:0], r.Keys...))
		}
		if err := p.sh.PullRows(p.tableName(r.Table), nil, ks, false, r.Values); err != nil {
			return err
		}
	}
	call.Step = p.sh.Step()
	return nil
}

func (p *localPS) tableName(name string) []byte {
	if b, ok := p.tables[name]; ok {
		return b
	}
	return []byte(name)
}

func (p *localPS) PullRows(ctx context.Context, _ int64, table string, keys []uint64, values []float32) (int64, error) {
	p.settle()
	if err := stopped(ctx); err != nil {
		return 0, err
	}
	if err := p.sh.PullRows(p.tableName(table), keys, nil, false, values); err != nil {
		return 0, err
	}
	return p.sh.Step(), nil
}

func (p *localPS) Status(context.Context) ([]*pb.StatusResponse, error) {
	p.settle()
	st := p.sh.Status()
	resp := &pb.StatusResponse{
		Initialized: st.Initialized, RejectedPushes: st.RejectedPushes, NumWorkers: int32(st.NumWorkers),
		GlobalStep: st.GlobalStep, StaleDropped: st.StaleDropped, AppliedPushes: st.AppliedPushes, Mode: st.Mode,
	}
	for _, t := range st.Tables {
		resp.Tables = append(resp.Tables, &pb.TableStatus{
			Name: t.Name, Rows: t.Rows, Bytes: t.Bytes, Admitted: t.Admitted,
			Evicted: t.Evicted, RejectedByAdmission: t.RejectedByAdmission,
		})
	}
	return []*pb.StatusResponse{resp}, nil
}

// RunStandalone trains the model in this process alone: the worker's loop,
// model and output (progress lines, the final evaluation, the result file)
// are those of a one-worker job, and the ps is its shard (update rules,
// tables, tracker) called directly, with no server, socket or copy to a
// wire. It is the baseline the distributed figures are measured against,
// and a way to debug a model without a cluster. cfg.Cluster is not read;
// checkpoints are not written (a --checkpoint_dir is refused).
func RunStandalone(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.CheckpointDir != "" {
		return &ConfigError{Err: fmt.Errorf("--standalone writes no checkpoints: drop --checkpoint_dir=%s", cfg.CheckpointDir)}
	}
	cfg.ReplicasToAggregate = 1
	data := cfg.Data
	data.Worker, data.NumWorkers = 0, 1
	if data.Logf == nil {
		data.Logf = cfg.Logf
	}
	start := time.Now()
	var m model.Model
	var err error
	if cfg.NewModel != nil {
		m, err = cfg.NewModel(data)
	} else {
		m, err = catalog.New(cfg.Model, data)
	}
	if err != nil {
		return &ConfigError{Err: err}
	}
	// No ps shares this process's cores: a model that can spread a step's
	// arithmetic over them (the pure-Go MLP's matrix multiply) may.
	if p, ok := m.(interface{ SetParallel(bool) }); ok {
		p.SetParallel(true)
	}
	sm, isSparse := m.(model.SparseModel)
	var tables []model.Table
	if isSparse {
		tables = sm.Tables()
	}
	ps, err := newLocalPS(cfg, m.Variables(), tables, m.Init(cfg.Data.Seed))
	if err != nil {
		return err
	}
	cfg.Logf("standalone: %d variables and %d sparse tables in this process, optimizer %s, %s", len(m.Variables()), len(tables), cfg.Optimizer.Name, ps.sh.Status().Mode)
	params := model.NewParams(m.Variables())
	trainStart, trainCPU := time.Now(), processCPU()
	var st loopStats
	if ra, ok := m.(model.SparseReadAhead); ok {
		err = sparsePipeLoop(ctx, cfg, ps, ra, params, &st)
	} else if isSparse {
		err = sparseLoop(ctx, cfg, ps, sm, params, nil, &st, false)
	} else {
		err = denseLoop(ctx, cfg, ps, m, params, nil, &st, false)
	}
	if err != nil {
		return err
	}
	elapsed, cpu := time.Since(trainStart), processCPU()-trainCPU
	cfg.Logf("worker 0: finished at global step %d after %d local steps (%d of its pushes dropped as stale)", st.step, st.local, st.dropped)
	cfg.Logf("Training elapsed time: %.1f s", elapsed.Seconds())
	endTraining(m)
	return finish(ctx, cfg, ps, m, params, nil, Result{
		Model: cfg.Model, LocalSteps: st.local, TrainLoss: st.loss, Workers: 1, Standalone: true,
		Optimizer: cfg.Optimizer.Name, LearningRate: cfg.Optimizer.LearningRate,
		ElapsedS: time.Since(start).Seconds(), ComputeS: st.compute.Seconds(), PushPullS: st.comm.Seconds(),
		ExamplesPerS:      float64(st.local) * float64(max(cfg.Data.BatchSize, 1)) / elapsed.Seconds(),
		ChiefExamplesPerS: float64(st.local) * float64(max(cfg.Data.BatchSize, 1)) / elapsed.Seconds(),
		BatchSize:         max(cfg.Data.BatchSize, 1), TrainingS: elapsed.Seconds(), PS: 0,
		TrainingCPUS: cpu.Seconds(),
	})
}
