package shard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/vfs"
)

// incrJob is a cluster of shards trained by random pushes and checkpointed
// as the ps and the chief do: each shard writes its cut, then a manifest.
type incrJob struct {
	t      *testing.T
	layout Layout
	shards []*Shard
	rng    *rand.Rand
	dir    string
	keys   uint64 // keys are drawn from [0, keys)
}

func newIncrJob(t *testing.T, l Layout, numPS int, values [][]float32) *incrJob {
	j := &incrJob{t: t, layout: l, rng: rand.New(rand.NewPCG(11, 12)), dir: t.TempDir(), keys: 400}
	for k := range numPS {
		s := New(Config{Task: k, NumPS: numPS, NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
		if _, err := s.Init(l, values); err != nil {
			t.Fatal(err)
		}
		j.shards = append(j.shards, s)
	}
	return j
}

// push sends one random push to every shard: the dense gradients and, for
// each table, the gradients of the keys it owns among a random batch (keys
// drawn mostly from a moving window, so that old rows are evicted and new
// ones admitted).
func (j *incrJob) push(window uint64) {
	for k, s := range j.shards {
		p := &Push{Worker: 0, Step: s.Step()}
		for _, v := range s.st.order {
			p.Dense = append(p.Dense, DenseGrad{Name: []byte(v.name), Values: randFloats(j.rng, len(v.value)), Bad: Unchecked})
		}
		for _, tb := range j.layout.Tables {
			seen := map[uint64]bool{}
			var keys []uint64
			for range 30 {
				key := window + j.rng.Uint64N(60)
				if j.rng.IntN(10) == 0 {
					key = j.rng.Uint64N(j.keys)
				}
				if !seen[key] && placement.KeyShard(key, len(j.shards)) == k {
					seen[key] = true
					keys = append(keys, key)
				}
			}
			p.Sparse = append(p.Sparse, SparseGrad{Table: []byte(tb.Name), Keys: keys, Values: randFloats(j.rng, len(keys)*int(tb.Dim)), Bad: Unchecked})
		}
		if err := s.Check(p); err != nil {
			j.t.Fatal(err)
		}
		if _, err := s.Apply(p, time.Unix(0, 0), nil); err != nil {
			j.t.Fatal(err)
		}
	}
}

// save writes checkpoint id: incremental against parent (-1: full) when
// incr, else a plain full Cut as a job without incremental checkpoints
// takes it.
func (j *incrJob) save(id, parent, base int64, incr bool) checkpoint.Manifest {
	t := j.t
	m := checkpoint.Manifest{Step: id, Mode: "async", NumPS: len(j.shards), NumWorkers: 1}
	for k, s := range j.shards {
		cut := s.Cut()
		if incr {
			cut = s.CutIncremental(id, parent)
		}
		// As a ps writes it: a full shard streams its tables in the
		// order they lie (keys in any order).
		info, err := checkpoint.WriteShard(vfs.OS, j.dir, id, k, len(j.shards), cut.StreamShard())
		cut.Release()
		if err != nil {
			t.Fatal(err)
		}
		m.Shards = append(m.Shards, info)
		if info.Delta {
			m.Kind, m.Parent, m.Base = checkpoint.KindDelta, parent, base
		}
	}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: j.layout.Optimizer, Tables: j.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	rule, err := optim.New(j.layout.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	slots := SlotNames(rule.Name(), rule.StateSlots())
	for _, tb := range j.layout.Tables {
		ti := checkpoint.TableInfo{Name: tb.Name, Dim: int64(tb.Dim), Slots: slots}
		for k := range j.shards {
			ti.Shards = append(ti.Shards, k)
		}
		m.Tables = append(m.Tables, ti)
	}
	for _, v := range j.layout.Vars { // placed whole on ps 0 (the tests with vars have 1 ps)
		m.Variables = append(m.Variables, checkpoint.VariableInfo{Name: v.Name, Shape: v.Shape, Slots: slots, Parts: []checkpoint.Part{{Shard: 0}}})
	}
	if err := checkpoint.WriteManifest(vfs.OS, j.dir, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// run trains and saves: a full checkpoint then deltas, a full one every
// fullEvery saves, the window of keys moving so rows are admitted and
// evicted between saves. It returns the manifest of the last save.
func (j *incrJob) run(saves, fullEvery int) checkpoint.Manifest {
	var m checkpoint.Manifest
	parent, base := int64(-1), int64(-1)
	window := uint64(0)
	for i := range saves {
		for range 7 {
			j.push(window)
		}
		window += 25
		id := int64(10 * (i + 1))
		if i%fullEvery == 0 {
			parent = -1
		}
		m = j.save(id, parent, base, true)
		if !m.IsDelta() {
			base = id
		}
		parent = id
	}
	return m
}

// readAll reads every shard of m (applying its chain), its tables in key
// order (the files hold them in any order, as the ps wrote them).
func readAll(t *testing.T, dir string, m checkpoint.Manifest) []checkpoint.Shard {
	t.Helper()
	var out []checkpoint.Shard
	for k := range m.Shards {
		sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
		if err != nil {
			t.Fatal(err)
		}
		if sh.Delta {
			t.Fatalf("ReadShard of shard %d returned a delta", k)
		}
		if sh, err = checkpoint.InKeyOrder(sh, m.Tables); err != nil {
			t.Fatal(err)
		}
		out = append(out, sh)
	}
	return out
}

// restoreState restores ps task of numPS from m and returns its full cut.
func restoreState(t *testing.T, dir string, m checkpoint.Manifest, task, numPS int) checkpoint.Shard {
	t.Helper()
	st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
		sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
		return &sh, err
	}, task, numPS, 1, testRunner)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Task: task, NumPS: numPS, NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	s.Install(st)
	return s.Cut().Shard()
}

var incrLayouts = map[string]Layout{
	// sparse_lr's: one FTRL weight per key, with admission and eviction.
	"sparse_lr-ftrl": {
		Vars:       []VarSpec{{Name: "bias", Shape: []int64{1}}},
		Tables:     []TableSpec{{Name: "w", Dim: 1, MinCount: 2, EvictAfterSteps: 10}},
		Optimizer:  optim.Config{Name: "ftrl", LearningRate: 0.05},
		NumWorkers: 1,
	},
	// A dense Adam model, with an Adam embedding table (per-row update
	// counts) that evicts.
	"dense-adam": {
		Vars:       []VarSpec{{Name: "hid_w", Shape: []int64{6, 4}}, {Name: "hid_b", Shape: []int64{4}}},
		Tables:     []TableSpec{{Name: "emb", Dim: 3, EvictAfterSteps: 10}},
		Optimizer:  optim.Config{Name: "adam", LearningRate: 0.01},
		NumWorkers: 1,
	},
}

func initValues(l Layout) [][]float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	var vals [][]float32
	for _, v := range l.Vars {
		n := int64(1)
		for _, d := range v.Shape {
			n *= d
		}
		vals = append(vals, randFloats(rng, int(n)))
	}
	return vals
}

// A chain of a full checkpoint and deltas, with rows admitted and evicted
// between saves, restores to the bytes of a full checkpoint taken at the
// same step: the shard files ReadShard builds, and the state a ps restores.
func TestIncrementalCheckpointMatchesFull(t *testing.T) {
	for name, l := range incrLayouts {
		t.Run(name, func(t *testing.T) {
			j := newIncrJob(t, l, 1, initValues(l))
			last := j.run(5, 10)
			if !last.IsDelta() || last.Base != 10 || last.Parent != 40 {
				t.Fatalf("the last save is %s of parent %d, base %d; want a delta of 40 on base 10", last.KindName(), last.Parent, last.Base)
			}
			tb := j.shards[0].st.tableOrd[0].t
			if st := tb.Stats(); st.Evicted == 0 || st.Admitted <= int64(st.Rows) {
				t.Fatalf("the run evicted %d rows and admitted %d (%d held): the test needs both", st.Evicted, st.Admitted, st.Rows)
			}
			full := j.save(1000, -1, -1, false)
			got, want := readAll(t, j.dir, last), readAll(t, j.dir, full)
			if err := checkpoint.DiffTensors(got[0], want[0]); err != nil {
				t.Fatalf("base + deltas differ from the full checkpoint at the same step: %v", err)
			}
			if err := checkpoint.DiffTensors(restoreState(t, j.dir, last, 0, 1), want[0]); err != nil {
				t.Fatalf("the state restored from base + deltas differs from the full checkpoint: %v", err)
			}
			// A delta is smaller than the full shard.
			if d, f := last.Shards[0].Size, full.Shards[0].Size; d >= f {
				t.Errorf("a delta shard is %d bytes, the full one %d", d, f)
			}
		})
	}
}

// A chain written by 2 ps restores onto 1 ps and onto 3 (re-sharding) to
// the state the full checkpoint at the same step restores to.
func TestIncrementalCheckpointReshards(t *testing.T) {
	l := incrLayouts["sparse_lr-ftrl"]
	l.Vars = nil
	j := newIncrJob(t, l, 2, nil)
	last := j.run(4, 10)
	if !last.IsDelta() {
		t.Fatalf("the last save is %s", last.KindName())
	}
	full := j.save(1000, -1, -1, false)
	for _, numPS := range []int{1, 3} {
		for task := range numPS {
			if err := checkpoint.DiffTensors(restoreState(t, j.dir, last, task, numPS), restoreState(t, j.dir, full, task, numPS)); err != nil {
				t.Fatalf("ps %d of %d restored from the chain differs from the full checkpoint: %v", task, numPS, err)
			}
		}
	}
}

// A shard that did not take the parent's cut (restarted, or asked against
// another checkpoint) writes a full shard, and one restored from a
// checkpoint can take deltas against it.
func TestCutIncrementalFallsBackToFull(t *testing.T) {
	l := incrLayouts["sparse_lr-ftrl"]
	j := newIncrJob(t, l, 1, initValues(l))
	j.push(0)
	if m := j.save(10, -1, -1, true); m.IsDelta() {
		t.Fatal("a first cut is a delta")
	}
	j.push(0)
	if m := j.save(20, 5, 5, true); m.IsDelta() {
		t.Fatal("a cut against a checkpoint the shard did not cut is a delta")
	}
	j.push(0)
	m := j.save(30, 20, 20, true)
	if !m.IsDelta() || m.Shards[0].Parent != 20 {
		t.Fatal("a cut against the previous one is not a delta")
	}
	j.push(0)
	st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
		sh, err := checkpoint.ReadShard(vfs.OS, j.dir, m, k)
		return &sh, err
	}, 0, 1, 1, testRunner)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
	r.Install(st)
	if c := r.CutIncremental(50, 30); !c.Delta() {
		t.Fatal("a restored shard's cut against the checkpoint it restored is not a delta")
	}
}

// A ps restored from a checkpoint whose files do not hold what it now
// holds (the golden v1 files place a variable on another ps than today's
// placement) takes no delta against it.
func TestNoDeltaOnReplacedRestore(t *testing.T) {
	golden, err := checkpoint.Load(vfs.OS, goldenDir, 200)
	if err != nil {
		t.Fatal(err)
	}
	for task := range golden.NumPS {
		st, err := Restore(contentsOf(golden), func(k int) (*checkpoint.Shard, error) {
			sh, err := checkpoint.ReadShard(vfs.OS, goldenDir, golden, k)
			return &sh, err
		}, task, golden.NumPS, golden.NumWorkers, testRunner)
		if err != nil {
			t.Fatal(err)
		}
		s := New(Config{Task: task, NumPS: golden.NumPS, NumWorkers: golden.NumWorkers, Incarnation: func() uint64 { return 1 }})
		s.Install(st)
		if c := s.CutIncremental(300, 200); c.Delta() {
			t.Fatalf("ps %d: a delta against a checkpoint whose variables it re-placed", task)
		}
	}
}
