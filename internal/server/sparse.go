package server

import (
	"fmt"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// sparseTable is one sparse table of the shard with, in synchronous mode,
// the sum of the current step's row gradients.
type sparseTable struct {
	name       string
	spec       *pb.TableSpec
	t          *sparse.Table
	evictEvery int64

	// sync accumulator: accKeys[i] has gradient acc[i*dim:(i+1)*dim].
	accPos  map[uint64]int
	accKeys []uint64
	acc     []float32
}

// sparseGrad is a checked sparse push for one table. On the data path set
// holds keys with their remembered rows (see keyCache).
type sparseGrad struct {
	table  *sparseTable
	keys   []uint64
	values []float32
	set    *sparse.KeySet
}

func newTables(req *pb.InitRequest, rule optim.Rule) (map[string]*sparseTable, error) {
	tables := make(map[string]*sparseTable, len(req.Tables))
	for _, spec := range req.Tables {
		if _, dup := tables[spec.Name]; dup {
			return nil, fmt.Errorf("table %q given twice", spec.Name)
		}
		cfg := sparse.Config{Dim: int(spec.Dim), Rule: rule, MinCount: int(spec.MinCount), EvictAfterSteps: spec.EvictAfterSteps}
		switch spec.Initializer {
		case "", "zeros":
		case "normal":
			cfg.Init = sparse.RandomNormal{Stddev: float32(spec.InitStddev), Seed: spec.Seed}
		default:
			return nil, fmt.Errorf("table %q: unknown initializer %q (want zeros or normal)", spec.Name, spec.Initializer)
		}
		t, err := sparse.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("table %q: %w", spec.Name, err)
		}
		st := &sparseTable{name: spec.Name, spec: spec, t: t, evictEvery: max(1, spec.EvictAfterSteps/10)}
		if req.Sync {
			st.accPos = make(map[uint64]int)
		}
		tables[spec.Name] = st
	}
	return tables, nil
}

// checkSparsePush validates the sparse part of a push before any of it is
// used: known table, whole keys, one row of gradients per key, finite
// values, and keys that this shard owns.
func (s *Server) checkSparsePush(req *pb.PushRequest) ([]sparseGrad, error) {
	out := make([]sparseGrad, 0, len(req.Sparse))
	for _, r := range req.Sparse {
		t, keys, err := s.sparseKeys(r)
		if err != nil {
			return nil, err
		}
		dim := t.t.Dim()
		if len(r.Values) != 4*dim*len(keys) {
			return nil, fmt.Errorf("table %q: %d keys of dim %d need %d bytes of gradients, got %d", r.Table, len(keys), dim, 4*dim*len(keys), len(r.Values))
		}
		vals, err := wire.Float32s(r.Values)
		if err != nil {
			return nil, fmt.Errorf("table %q: %w", r.Table, err)
		}
		if j := wire.FirstNonFinite(vals); j >= 0 {
			return nil, fmt.Errorf("table %q: gradient of key %d element %d is %v", r.Table, keys[j/dim], j%dim, vals[j])
		}
		out = append(out, sparseGrad{table: t, keys: keys, values: vals})
	}
	return out, nil
}

// sparseKeys finds r's table and decodes its keys, checking that this shard
// owns every one.
func (s *Server) sparseKeys(r *pb.SparseRows) (*sparseTable, []uint64, error) {
	t, ok := s.tables[r.Table]
	if !ok {
		return nil, nil, fmt.Errorf("unknown table %q (this ps holds %d tables)", r.Table, len(s.tables))
	}
	keys, err := wire.Uint64s(r.Keys)
	if err != nil {
		return nil, nil, fmt.Errorf("table %q: %w", r.Table, err)
	}
	if s.cfg.NumPS > 1 {
		for _, k := range keys {
			if ps := placement.KeyShard(k, s.cfg.NumPS); ps != s.cfg.Task {
				return nil, nil, fmt.Errorf("table %q: key %d belongs to ps %d, not ps %d", r.Table, k, ps, s.cfg.Task)
			}
		}
	}
	return t, keys, nil
}

func (s *Server) pullSparse(r *pb.SparseRows) (*pb.SparseRows, error) {
	t, keys, err := s.sparseKeys(r)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(keys)*t.t.Dim())
	if err := t.t.Pull(keys, out); err != nil {
		return nil, fmt.Errorf("table %q: %w", r.Table, err)
	}
	return &pb.SparseRows{Table: r.Table, Keys: r.Keys, Values: wire.Float32Bytes(out)}, nil
}

func (t *sparseTable) push(keys []uint64, grads []float32, step int64) {
	// The push was checked; the table can only refuse a malformed one.
	if err := t.t.Push(keys, grads, step); err != nil {
		panic(fmt.Sprintf("server: checked push refused by table %q: %v", t.name, err))
	}
}

// accumulate adds a synchronous step's row gradients to the sum.
func (t *sparseTable) accumulate(keys []uint64, grads []float32) {
	dim := t.t.Dim()
	for i, k := range keys {
		pos, ok := t.accPos[k]
		if !ok {
			pos = len(t.accKeys)
			t.accPos[k] = pos
			t.accKeys = append(t.accKeys, k)
			t.acc = append(t.acc, make([]float32, dim)...)
		}
		row := t.acc[pos*dim : (pos+1)*dim]
		for j := range row {
			row[j] += grads[i*dim+j]
		}
	}
}

// applyAccumulated applies the sum times scale (1/replicas) and clears it.
func (t *sparseTable) applyAccumulated(scale float32, step int64) {
	if len(t.accKeys) == 0 {
		return
	}
	for i := range t.acc {
		t.acc[i] *= scale
	}
	t.push(t.accKeys, t.acc, step)
	clear(t.accPos)
	t.accKeys, t.acc = t.accKeys[:0], t.acc[:0]
}

// maybeEvict runs eviction every tenth of each table's idle limit. Call
// with mu held, after the step advanced.
func (s *Server) maybeEvict() {
	step := s.tracker.Step()
	for _, t := range s.tables {
		if t.spec.EvictAfterSteps > 0 && step%t.evictEvery == 0 {
			if n := t.t.Evict(step); n > 0 {
				s.cfg.Logf("table %q: evicted %d rows idle for more than %d steps (%d rows left)", t.name, n, t.spec.EvictAfterSteps, t.t.Len())
			}
		}
	}
}

func (t *sparseTable) status() *pb.TableStatus {
	st := t.t.Stats()
	return &pb.TableStatus{
		Name: t.name, Rows: int64(st.Rows), Bytes: st.Bytes, Admitted: st.Admitted,
		Evicted: st.Evicted, RejectedByAdmission: st.RejectedPulls + st.RejectedPushes,
	}
}
