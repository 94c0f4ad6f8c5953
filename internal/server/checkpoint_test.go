package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/placement"
	"github.com/paramserv/paramserv/internal/shard"
	"github.com/paramserv/paramserv/internal/vfs"
	"github.com/paramserv/paramserv/internal/wire"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

// cluster is numPS in-memory servers (no network) sharing one filesystem.
type cluster struct {
	fs  vfs.FS
	ps  []*Server
	req *pb.InitRequest
}

const dir = "/ckpt"

// newCluster initialises numPS servers with a dense variable "w" [rows,3]
// split by rows across them, a whole variable "b" [2], and a table "emb" of
// dim 2, trained with Adam (two state slots and update counts).
func newCluster(t *testing.T, fs vfs.FS, numPS int) *cluster {
	t.Helper()
	c := &cluster{fs: fs}
	for k := range numPS {
		c.ps = append(c.ps, New(Config{Task: k, NumPS: numPS, NumWorkers: 1, CheckpointDir: dir, FS: fs}))
	}
	return c
}

func (c *cluster) init(t *testing.T) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	vars := map[string][]float32{"w": make([]float32, 7*3), "b": {0.5, -0.5}}
	for i := range vars["w"] {
		vars["w"][i] = float32(rng.NormFloat64())
	}
	plan := c.plan(t)
	for k, s := range c.ps {
		req := &pb.InitRequest{
			Optimizer:  &pb.OptimizerConfig{Name: "adam", LearningRate: 0.1},
			NumWorkers: 1, SplitBytes: 40,
			Tables: []*pb.TableSpec{{Name: "emb", Dim: 2, Initializer: "normal", InitStddev: 0.1, Seed: 9}},
		}
		for _, p := range plan.OnPS(k) {
			full := vars[strings.Split(p.Name, "/part_")[0]]
			shape := []int64{}
			for _, d := range p.Shape {
				shape = append(shape, int64(d))
			}
			req.Vars = append(req.Vars, &pb.VarSpec{Name: p.Name, Shape: shape, Init: wire.Float32Bytes(full[p.Offset : p.Offset+p.Len])})
		}
		if _, err := s.Init(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		c.req = req
	}
}

func (c *cluster) plan(t *testing.T) placement.Plan {
	plan, err := placement.Place(len(c.ps), []model.Variable{{Name: "w", Shape: []int{7, 3}}, {Name: "b", Shape: []int{2}}}, 40)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// train pushes steps of random gradients to every shard.
func (c *cluster) train(t *testing.T, steps int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	plan := c.plan(t)
	for range steps {
		keys := []uint64{1, 2, 3, 1000, uint64(rng.IntN(50))}
		for k, s := range c.ps {
			req := &pb.PushRequest{Step: s.shard.Step()}
			for _, p := range plan.OnPS(k) {
				g := make([]float32, p.Len)
				for i := range g {
					g[i] = float32(rng.NormFloat64())
				}
				req.Grads = append(req.Grads, &pb.DenseTensor{Name: p.Name, Data: wire.Float32Bytes(g)})
			}
			var mine []uint64
			for _, key := range keys {
				if placement.KeyShard(key, len(c.ps)) == k && !contains(mine, key) {
					mine = append(mine, key)
				}
			}
			g := make([]float32, 2*len(mine))
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			req.Sparse = []*pb.SparseRows{{Table: "emb", Keys: wire.Uint64Bytes(mine), Values: wire.Float32Bytes(g)}}
			if _, err := s.Push(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func contains(ks []uint64, k uint64) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// save writes a checkpoint as the chief would: every shard, then the manifest.
func (c *cluster) save(t *testing.T) int64 {
	t.Helper()
	step := c.ps[0].shard.Step()
	var infos []checkpoint.ShardInfo
	for _, s := range c.ps {
		resp, err := s.Checkpoint(context.Background(), &pb.CheckpointRequest{Dir: dir, Step: step, NumShards: int32(len(c.ps))})
		if err != nil {
			t.Fatal(err)
		}
		var info checkpoint.ShardInfo
		if err := json.Unmarshal(resp.ShardInfo, &info); err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	plan := c.plan(t)
	slots := shard.SlotNames("adam", 2)
	m := checkpoint.Manifest{Step: step, NumPS: len(c.ps), NumWorkers: 1, Shards: infos,
		Tables: []checkpoint.TableInfo{{Name: "emb", Dim: 2, Slots: slots}}}
	if err := m.SetTraining(checkpoint.Training{
		Mode: "async", Optimizer: optim.Config{Name: "adam", LearningRate: 0.1}, SplitBytes: 40, ReplicasToAggregate: 1,
		Tables: []checkpoint.TableSpec{{Name: "emb", Dim: 2, Initializer: "normal", InitStddev: 0.1, Seed: 9}},
	}); err != nil {
		t.Fatal(err)
	}
	for k := range c.ps {
		m.Tables[0].Shards = append(m.Tables[0].Shards, k)
	}
	for _, v := range plan.Vars {
		vi := checkpoint.VariableInfo{Name: v.Name, Slots: slots}
		for _, d := range v.Shape {
			vi.Shape = append(vi.Shape, int64(d))
		}
		for _, p := range v.Parts {
			part := checkpoint.Part{Shard: p.PS}
			if len(v.Parts) > 1 {
				row := v.Size() / v.Shape[0]
				part.Rows = []int64{int64(p.Offset / row), int64((p.Offset + p.Len) / row)}
			}
			vi.Parts = append(vi.Parts, part)
		}
		m.Variables = append(m.Variables, vi)
	}
	if err := checkpoint.WriteManifest(c.fs, dir, m); err != nil {
		t.Fatal(err)
	}
	return step
}

// state flattens the whole model: every variable's values, state and
// update count, and every row with its state, as bit patterns.
func (c *cluster) state(t *testing.T) map[string][]uint32 {
	t.Helper()
	out := map[string][]uint32{}
	add := func(name string, f []float32) {
		for _, x := range f {
			out[name] = append(out[name], math.Float32bits(x))
		}
	}
	for _, s := range c.ps {
		s.mu.Lock()
		sh := s.shard.Snapshot()
		s.mu.Unlock()
		keys, _ := sh.Uint64s(checkpoint.KeysName("emb"))
		for _, tn := range sh.Tensors {
			table, col, isTable := strings.Cut(tn.Name, "/")
			if !isTable || table != "emb" {
				// a variable (its parts concatenated in ps order, which is
				// row order) or its slot
				f, err := sh.Float32s(tn.Name)
				if err != nil {
					t.Fatal(err)
				}
				add(tn.Name, f)
				continue
			}
			if col == "keys" {
				continue
			}
			per := len(tn.Data) / 4 / max(1, len(keys)) // values of a key
			if tn.DType == checkpoint.I64 {
				per = 1
			}
			for i, k := range keys {
				key := "emb/" + strconv.FormatUint(k, 10) + "/" + col
				if tn.DType == checkpoint.I64 {
					u, _ := sh.Int64s(tn.Name)
					out[key] = []uint32{uint32(u[i])}
					continue
				}
				f, _ := sh.Float32s(tn.Name)
				add(key, f[per*i:per*(i+1)])
			}
		}
		for k, v := range sh.Meta {
			if strings.HasPrefix(k, "updates/") {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[k] = []uint32{uint32(n)}
			}
		}
	}
	return out
}

func equalState(t *testing.T, got, want map[string][]uint32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("restored state has %d entries, want %d", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", k, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s[%d]: bits %08x, want %08x", k, i, g[i], w[i])
			}
		}
	}
}

// A checkpoint restored onto the same number of ps, and onto more (2 → 3,
// re-sharding dense parts and table rows), holds bit for bit the state it
// was written from, optimizer state and update counts included.
func TestCheckpointRoundTripAndReshard(t *testing.T) {
	fs := vfs.NewMem()
	a := newCluster(t, fs, 2)
	a.init(t)
	a.train(t, 25, 1)
	step := a.save(t)
	want := a.state(t)

	for _, numPS := range []int{2, 3, 1} {
		b := newCluster(t, fs, numPS)
		for _, s := range b.ps {
			ok, err := s.RestoreLatest()
			if err != nil || !ok {
				t.Fatalf("%d ps: restore: %v %v", numPS, ok, err)
			}
			if s.shard.Step() != step {
				t.Fatalf("%d ps: restored at step %d, want %d", numPS, s.shard.Step(), step)
			}
		}
		equalState(t, b.state(t), want)
	}

	// Training on from the restored state goes the same way as training on
	// from the original.
	b := newCluster(t, fs, 2)
	for _, s := range b.ps {
		if _, err := s.RestoreLatest(); err != nil {
			t.Fatal(err)
		}
	}
	a.train(t, 5, 7)
	b.train(t, 5, 7)
	equalState(t, b.state(t), a.state(t))
}

// A damaged newest checkpoint is skipped for the one before it.
func TestRestoreSkipsDamagedCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	a := newCluster(t, fs, 2)
	a.init(t)
	a.train(t, 3, 1)
	good := a.save(t)
	a.train(t, 3, 2)
	bad := a.save(t)
	// Corrupt one byte of a shard of the newer checkpoint.
	path := dir + "/" + checkpoint.CheckpointName(bad) + "/" + checkpoint.ShardFileName(1, 2)
	corrupt(t, fs, path)
	var logs []string
	s := New(Config{Task: 0, NumPS: 2, NumWorkers: 1, CheckpointDir: dir, FS: fs, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	if ok, err := s.RestoreLatest(); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if s.shard.Step() != good {
		t.Fatalf("restored step %d, want the older good one %d", s.shard.Step(), good)
	}
	if !containsLine(logs, checkpoint.CheckpointName(bad)+" damaged") {
		t.Fatalf("log does not say the newer checkpoint was damaged: %q", logs)
	}
}

// --sync_timeout: with "proceed" the step completes with the gradients
// that came; with "fail" every waiting pull fails, naming the missing
// worker.
func TestSyncTimeout(t *testing.T) {
	for _, proceed := range []bool{true, false} {
		s := New(Config{NumWorkers: 2, WaitLogEvery: time.Hour})
		_, err := s.Init(context.Background(), &pb.InitRequest{
			Vars:      []*pb.VarSpec{{Name: "w", Shape: []int64{1}, Init: f32(1)}},
			Optimizer: &pb.OptimizerConfig{Name: "sgd", LearningRate: 1}, Sync: true, ReplicasToAggregate: 2, NumWorkers: 2,
			SyncTimeoutMs: 50, SyncProceed: proceed,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Push(context.Background(), &pb.PushRequest{Worker: 0, Step: 0, Grads: []*pb.DenseTensor{{Name: "w", Data: f32(0.25)}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Pull(context.Background(), &pb.PullRequest{Worker: 0, MinStep: 1})
		if proceed {
			if err != nil {
				t.Fatalf("proceed: %v", err)
			}
			w, _ := wire.Float32s(resp.Vars[0].Data)
			if resp.GlobalStep != 1 || w[0] != 0.75 { // averaged over the 1 gradient that came
				t.Fatalf("proceed: step %d w %v, want step 1 and w 0.75", resp.GlobalStep, w)
			}
		} else if status.Code(err) != codes.DeadlineExceeded || !containsLine([]string{err.Error()}, "no gradient from workers [1]") {
			t.Fatalf("fail: %v", err)
		}
	}
}

func containsLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// corrupt flips one byte in the middle of a file.
func corrupt(t *testing.T, fs vfs.FS, path string) {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	w, err := fs.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
}
