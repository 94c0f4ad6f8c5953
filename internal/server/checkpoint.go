package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// How a shard's state is named in a checkpoint shard file:
//
//	<var>                 F32, the part of the variable this ps holds
//	<var>/<slot>          F32, its optimizer state (SlotNames)
//	<table>/keys          U64 [n], ascending
//	<table>/values        F32 [n, dim]
//	<table>/<slot>        F32 [n, dim]
//	<table>/updates       I64 [n], per-row update counts (Adam)
//	<table>/last_touch    I64 [n], per-row last-touched step (eviction)
//
// and in the shard's metadata "updates/<var>" holds a variable's update count.
// Variables split across ps are stored under their own name on each shard,
// with the rows each holds recorded in the manifest.

// Meta keys the chief writes into a checkpoint manifest.
const (
	MetaReplicas     = "replicas_to_aggregate"
	MetaMaxStaleness = "max_staleness"
	MetaSplitBytes   = "split_bytes"
	MetaSyncTimeout  = "sync_timeout_ms"
	MetaSyncProceed  = "sync_proceed"
	MetaTables       = "tables"
)

func newIncarnation() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// SlotNames names the state slots of a rule, in the order of its state
// vectors, as checkpoints store them.
func SlotNames(rule string, slots int) []string {
	known := map[string][]string{
		"momentum": {"momentum"},
		"adagrad":  {"adagrad_accum"},
		"adam":     {"adam_m", "adam_v"},
		"ftrl":     {"ftrl_n", "ftrl_z"},
	}
	if names, ok := known[strings.ToLower(rule)]; ok && len(names) == slots {
		return names
	}
	names := make([]string, slots)
	for i := range names {
		names[i] = fmt.Sprintf("%s_%d", rule, i)
	}
	return names
}

// baseName is the variable a shard-local part name belongs to.
func baseName(part string) string {
	if i := strings.LastIndex(part, "/part_"); i >= 0 {
		if _, err := strconv.Atoi(part[i+len("/part_"):]); err == nil {
			return part[:i]
		}
	}
	return part
}

// snapshot copies the shard's state into a checkpoint shard. Call with mu
// held; the copy is written to disk after mu is released.
func (s *Server) snapshot() checkpoint.Shard {
	sh := checkpoint.Shard{Step: s.tracker.Step(), Meta: map[string]string{}}
	slots := SlotNames(s.rule.Name(), s.rule.StateSlots())
	for _, spec := range s.layout {
		v := s.vars[spec.Name]
		name := baseName(v.name)
		sh.Tensors = append(sh.Tensors, checkpoint.Float32Tensor(name, v.shape, slices.Clone(v.value)))
		for i, st := range v.state {
			sh.Tensors = append(sh.Tensors, checkpoint.Float32Tensor(checkpoint.SlotName(name, slots[i]), v.shape, slices.Clone(st)))
		}
		sh.Meta["updates/"+name] = strconv.FormatInt(v.updates, 10)
	}
	for _, spec := range s.tableLayout {
		t := s.tables[spec.Name]
		snap := t.t.Export()
		n, d := int64(len(snap.Keys)), int64(snap.Dim)
		sh.Tensors = append(sh.Tensors,
			checkpoint.Uint64Tensor(checkpoint.KeysName(spec.Name), []int64{n}, snap.Keys),
			checkpoint.Float32Tensor(checkpoint.ValuesName(spec.Name), []int64{n, d}, snap.Values))
		for i, st := range snap.State {
			sh.Tensors = append(sh.Tensors, checkpoint.Float32Tensor(checkpoint.SlotName(spec.Name, slots[i]), []int64{n, d}, st))
		}
		if snap.Updates != nil {
			u := make([]int64, len(snap.Updates))
			for i, x := range snap.Updates {
				u[i] = int64(x)
			}
			sh.Tensors = append(sh.Tensors, checkpoint.Int64Tensor(checkpoint.SlotName(spec.Name, "updates"), []int64{n}, u))
		}
		if snap.LastTouch != nil {
			sh.Tensors = append(sh.Tensors, checkpoint.Int64Tensor(checkpoint.SlotName(spec.Name, "last_touch"), []int64{n}, snap.LastTouch))
		}
	}
	return sh
}

// Checkpoint writes this shard into dir/ckpt-<step>/. In synchronous mode
// the shard must be exactly at the requested step (else Aborted: the chief
// tries again at a later step); in asynchronous mode it is cut at its
// current step, which the answer reports.
func (s *Server) Checkpoint(_ context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	s.mu.Lock()
	if !s.initialized {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, errNotInitialized)
	}
	if req.Dir == "" || req.NumShards != int32(s.cfg.NumPS) {
		s.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "ps %d: checkpoint needs a directory and %d shards, got %q and %d", s.cfg.Task, s.cfg.NumPS, req.Dir, req.NumShards)
	}
	if s.tracker.Config().Sync && s.tracker.Step() != req.Step {
		step := s.tracker.Step()
		s.mu.Unlock()
		return nil, status.Errorf(codes.Aborted, "ps %d is at step %d, not %d: a synchronous checkpoint must cut every shard at the same step", s.cfg.Task, step, req.Step)
	}
	sh := s.snapshot()
	s.mu.Unlock()

	start := time.Now()
	info, err := checkpoint.WriteShard(s.cfg.FS, req.Dir, req.Step, s.cfg.Task, s.cfg.NumPS, sh)
	if err != nil {
		s.cfg.Logf("checkpoint at step %d failed: %v", req.Step, err)
		return nil, status.Errorf(codes.Internal, "ps %d: writing its checkpoint shard: %v", s.cfg.Task, err)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.cfg.Logf("checkpoint: wrote %s of step %d (cut at step %d, %d bytes) in %s", info.File, req.Step, sh.Step, info.Size, time.Since(start).Round(time.Millisecond))
	return &pb.CheckpointResponse{ShardInfo: b, CutStep: sh.Step}, nil
}

// RestoreLatest restores the latest valid checkpoint of Config.CheckpointDir,
// logging each newer one it had to skip and why. It reports false when there
// is none (the ps then waits for the chief's Init).
func (s *Server) RestoreLatest() (bool, error) {
	if s.cfg.CheckpointDir == "" {
		return false, nil
	}
	m, skipped, err := checkpoint.Latest(s.cfg.FS, s.cfg.CheckpointDir)
	for _, sk := range skipped {
		s.cfg.Logf("checkpoint: %s; trying an older one", sk)
	}
	if errors.Is(err, checkpoint.ErrNotFound) {
		s.cfg.Logf("checkpoint: no valid checkpoint in %s; waiting for the chief to initialise", s.cfg.CheckpointDir)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.restore(m); err != nil {
		return false, err
	}
	return true, nil
}

// Restore replaces the shard's state with the checkpoint of req.Step, aborts
// every waiting pull, and takes a new incarnation.
func (s *Server) Restore(_ context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	m, err := checkpoint.Load(s.cfg.FS, req.Dir, req.Step)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ps %d: checkpoint of step %d in %s: %v", s.cfg.Task, req.Step, req.Dir, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.CheckpointDir = req.Dir
	if err := s.restore(m); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ps %d: %v", s.cfg.Task, err)
	}
	return &pb.RestoreResponse{GlobalStep: s.tracker.Step(), Incarnation: s.incarnation}, nil
}

// restore installs the checkpoint m. With the same number of ps as when it
// was written, the ps reads only its own shard; otherwise it reads them all
// and takes its share under the new placement (re-sharding). Call with mu
// held.
func (s *Server) restore(m checkpoint.Manifest) error {
	start := time.Now()
	var oc optim.Config
	if err := json.Unmarshal(m.Optimizer, &oc); err != nil {
		return fmt.Errorf("checkpoint of step %d: optimizer %s: %w", m.Step, m.Optimizer, err)
	}
	rule, err := optim.New(oc)
	if err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	meta := func(k string) int64 {
		n, _ := strconv.ParseInt(m.Meta[k], 10, 64)
		return n
	}
	req := &pb.InitRequest{
		Optimizer: &pb.OptimizerConfig{
			Name: oc.Name, LearningRate: oc.LearningRate, Momentum: oc.Momentum, Nesterov: oc.Nesterov,
			InitialAccumulator: oc.InitialAccumulator, Beta1: oc.Beta1, Beta2: oc.Beta2, Epsilon: oc.Epsilon,
			FtrlBeta: oc.FTRLBeta, L1: oc.L1, L2: oc.L2,
		},
		Sync:                m.Mode == "sync",
		ReplicasToAggregate: int32(min(meta(MetaReplicas), int64(s.cfg.NumWorkers))),
		NumWorkers:          int32(s.cfg.NumWorkers),
		GlobalStep:          m.Step,
		MaxStaleness:        meta(MetaMaxStaleness),
		SyncTimeoutMs:       meta(MetaSyncTimeout),
		SyncProceed:         m.Meta[MetaSyncProceed] == "true",
		SplitBytes:          meta(MetaSplitBytes),
	}
	if t := m.Meta[MetaTables]; t != "" {
		if err := json.Unmarshal([]byte(t), &req.Tables); err != nil {
			return fmt.Errorf("checkpoint of step %d: table specs: %w", m.Step, err)
		}
	}
	// This ps's parts under the current placement.
	vars := make([]model.Variable, len(m.Variables))
	for i, v := range m.Variables {
		shape := make([]int, len(v.Shape))
		for j, d := range v.Shape {
			shape[j] = int(d)
		}
		vars[i] = model.Variable{Name: v.Name, Shape: shape}
	}
	plan, err := placement.Place(s.cfg.NumPS, vars, int(req.SplitBytes))
	if err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	reshard := m.NumPS != s.cfg.NumPS
	shards := make([]*checkpoint.Shard, len(m.Shards))
	read := func(k int) (*checkpoint.Shard, error) {
		if shards[k] == nil {
			sh, err := checkpoint.ReadShard(s.cfg.FS, s.cfg.CheckpointDir, m, k)
			if err != nil {
				return nil, err
			}
			shards[k] = &sh
		}
		return shards[k], nil
	}
	slots := SlotNames(rule.Name(), rule.StateSlots())
	// full assembles a tensor of variable v (its value or a slot) from the
	// parts of every shard holding it, in row order.
	full := func(v checkpoint.VariableInfo, name string) ([]float32, error) {
		var out []float32
		for _, p := range v.Parts {
			sh, err := read(p.Shard)
			if err != nil {
				return nil, err
			}
			f, err := sh.Float32s(name)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	}
	type restored struct {
		state   [][]float32
		updates int64
	}
	extra := map[string]restored{}
	for i, pv := range plan.Vars {
		v := m.Variables[i]
		for _, part := range pv.Parts {
			if part.PS != s.cfg.Task {
				continue
			}
			get := func(name string) ([]float32, error) {
				if !reshard {
					sh, err := read(s.cfg.Task)
					if err != nil {
						return nil, err
					}
					return sh.Float32s(name)
				}
				f, err := full(v, name)
				if err != nil {
					return nil, err
				}
				return f[part.Offset : part.Offset+part.Len], nil
			}
			value, err := get(v.Name)
			if err != nil {
				return fmt.Errorf("checkpoint of step %d: variable %q: %w", m.Step, v.Name, err)
			}
			if len(value) != part.Len {
				return fmt.Errorf("checkpoint of step %d: variable %q has %d values for this ps, want %d", m.Step, v.Name, len(value), part.Len)
			}
			r := restored{}
			for _, slot := range slots {
				st, err := get(checkpoint.SlotName(v.Name, slot))
				if err != nil {
					return fmt.Errorf("checkpoint of step %d: variable %q: %w", m.Step, v.Name, err)
				}
				r.state = append(r.state, slices.Clone(st))
			}
			for _, p := range v.Parts {
				if sh, err := read(p.Shard); err == nil {
					n, _ := strconv.ParseInt(sh.Meta["updates/"+v.Name], 10, 64)
					r.updates = max(r.updates, n)
				}
				if !reshard {
					break
				}
			}
			shape := make([]int64, len(part.Shape))
			for j, d := range part.Shape {
				shape[j] = int64(d)
			}
			req.Vars = append(req.Vars, &pb.VarSpec{Name: part.Name, Shape: shape, Init: slices.Clone(wire.Float32Bytes(value))})
			extra[part.Name] = r
		}
	}
	st, err := build(req)
	if err != nil {
		return fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	for name, r := range extra {
		v := st.vars[name]
		for i := range v.state {
			copy(v.state[i], r.state[i])
		}
		v.updates = r.updates
	}
	for _, tb := range m.Tables {
		t, ok := st.tables[tb.Name]
		if !ok {
			return fmt.Errorf("checkpoint of step %d: table %q has no spec in the manifest", m.Step, tb.Name)
		}
		from := []int{s.cfg.Task}
		if reshard {
			from = tb.Shards
		}
		snap, err := s.tableRows(read, from, tb, slots, int(t.t.Dim()), reshard)
		if err != nil {
			return fmt.Errorf("checkpoint of step %d: table %q: %w", m.Step, tb.Name, err)
		}
		if err := t.t.Import(snap); err != nil {
			return fmt.Errorf("checkpoint of step %d: table %q: %w", m.Step, tb.Name, err)
		}
	}
	s.install(st, req)
	s.incarnation = newIncarnation()
	s.restoredStep = m.Step
	s.epoch++
	how := ""
	if reshard {
		how = fmt.Sprintf(", re-sharded from %d ps to %d", m.NumPS, s.cfg.NumPS)
	}
	s.cfg.Logf("restored checkpoint of step %d from %s%s in %s: %s", m.Step, s.cfg.CheckpointDir, how, time.Since(start).Round(time.Millisecond), st.describe())
	return nil
}

// tableRows gathers a table's rows from the given shards, keeping (when
// re-sharding) those this ps owns under the current number of ps, sorted by
// key.
func (s *Server) tableRows(read func(int) (*checkpoint.Shard, error), from []int, tb checkpoint.TableInfo, slots []string, dim int, reshard bool) (sparse.Snapshot, error) {
	type row struct {
		key      uint64
		shard, i int
	}
	var rows []row
	type cols struct {
		values  []float32
		state   [][]float32
		updates []int64
		touch   []int64
	}
	data := map[int]*cols{}
	hasUpdates, hasTouch := false, false
	for _, k := range from {
		sh, err := read(k)
		if err != nil {
			return sparse.Snapshot{}, err
		}
		keys, err := sh.Uint64s(checkpoint.KeysName(tb.Name))
		if err != nil {
			return sparse.Snapshot{}, err
		}
		c := &cols{}
		if c.values, err = sh.Float32s(checkpoint.ValuesName(tb.Name)); err != nil {
			return sparse.Snapshot{}, err
		}
		for _, slot := range slots {
			st, err := sh.Float32s(checkpoint.SlotName(tb.Name, slot))
			if err != nil {
				return sparse.Snapshot{}, err
			}
			c.state = append(c.state, st)
		}
		if u, err := sh.Int64s(checkpoint.SlotName(tb.Name, "updates")); err == nil {
			c.updates, hasUpdates = u, true
		}
		if lt, err := sh.Int64s(checkpoint.SlotName(tb.Name, "last_touch")); err == nil {
			c.touch, hasTouch = lt, true
		}
		data[k] = c
		for i, key := range keys {
			if reshard && placement.KeyShard(key, s.cfg.NumPS) != s.cfg.Task {
				continue
			}
			rows = append(rows, row{key: key, shard: k, i: i})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	snap := sparse.Snapshot{Dim: dim, Keys: make([]uint64, len(rows)), Values: make([]float32, 0, len(rows)*dim)}
	snap.State = make([][]float32, len(slots))
	if hasUpdates {
		snap.Updates = make([]uint32, len(rows))
	}
	if hasTouch {
		snap.LastTouch = make([]int64, len(rows))
	}
	for j, r := range rows {
		c := data[r.shard]
		snap.Keys[j] = r.key
		snap.Values = append(snap.Values, c.values[r.i*dim:(r.i+1)*dim]...)
		for si := range slots {
			snap.State[si] = append(snap.State[si], c.state[si][r.i*dim:(r.i+1)*dim]...)
		}
		if hasUpdates && c.updates != nil {
			snap.Updates[j] = uint32(c.updates[r.i])
		}
		if hasTouch && c.touch != nil {
			snap.LastTouch[j] = c.touch[r.i]
		}
	}
	return snap, nil
}
