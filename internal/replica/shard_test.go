package replica

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/shard"
)

// TestSyncJobSurvivesAKilledPrimaryBitIdentical runs a synchronous job of
// 2 workers on 3 ps with 2 copies of each shard, every copy a real
// shard.Shard (Adam, so optimizer state counts too), through the protocol
// core and a simulated network and clock. Mid-step, right after worker 0's
// push reached ps 1 (primary of shard 1) and its backup, ps 1 is killed
// before it acknowledges. The workers re-route after the failover timeout,
// retry (recognised as duplicates), and the job ends with values
// bit-identical to the same job undisturbed, at the same step.
func TestSyncJobSurvivesAKilledPrimaryBitIdentical(t *testing.T) {
	const steps = 12
	calm := runJob(t, job{sync: true, n: 3, r: 2, steps: steps})
	for _, killAt := range []int64{0, 5, steps - 1} {
		t.Run(fmt.Sprintf("kill ps 1 at step %d", killAt), func(t *testing.T) {
			hurt := runJob(t, job{sync: true, n: 3, r: 2, steps: steps, kills: []kill{{ps: 1, step: killAt}}})
			if !hurt.killed {
				t.Fatalf("ps 1 was never killed")
			}
			for s := range calm.values {
				if calm.steps[s] != hurt.steps[s] {
					t.Errorf("shard %d ends at step %d, undisturbed %d", s, hurt.steps[s], calm.steps[s])
				}
				for i := range calm.values[s] {
					if math.Float32bits(calm.values[s][i]) != math.Float32bits(hurt.values[s][i]) {
						t.Fatalf("shard %d value %d: %v after the kill, %v undisturbed", s, i, hurt.values[s][i], calm.values[s][i])
					}
				}
			}
			sameCheckpoints(t, "after the kill", calm, hurt)
			if hurt.dups == 0 {
				t.Errorf("no retry was recognised: the killed primary's last push should have reached its backup")
			}
			if hurt.tookOver == "" {
				t.Errorf("no takeover logged")
			}
			t.Logf("%s; kill to the first push to shard 1 acknowledged: %v (failover timeout %v)", hurt.tookOver, hurt.killToAck, hurt.timeout)
			if hurt.killToAck > hurt.timeout+time.Second {
				t.Errorf("first push acknowledged %v after the kill, want within the timeout (%v) + 1s", hurt.killToAck, hurt.timeout)
			}
		})
	}
}

// TestSyncJobByAggregateBitIdentical replicates each sync step's averaged
// gradients once (replication after aggregation) instead of each worker's
// push: the job ends bit-identical to the one replicating pushes, with
// half the gradient values shipped (2 workers), and also when the primary
// is killed right after shipping a step's aggregate, before acknowledging
// it (both workers' retries are recognised).
func TestSyncJobByAggregateBitIdentical(t *testing.T) {
	const steps = 12
	byPush := runJob(t, job{sync: true, n: 3, r: 2, steps: steps})
	byAgg := runJob(t, job{sync: true, aggregate: true, n: 3, r: 2, steps: steps})
	hurt := runJob(t, job{sync: true, aggregate: true, n: 3, r: 2, steps: steps, kills: []kill{{ps: 1, step: 5}}})
	for name, got := range map[string]jobResult{"by aggregate": byAgg, "by aggregate, ps 1 killed": hurt} {
		for s := range byPush.values {
			if got.steps[s] != byPush.steps[s] {
				t.Errorf("%s: shard %d ends at step %d, by push %d", name, s, got.steps[s], byPush.steps[s])
			}
			for i := range byPush.values[s] {
				if math.Float32bits(byPush.values[s][i]) != math.Float32bits(got.values[s][i]) {
					t.Fatalf("%s: shard %d value %d: %v, by push %v", name, s, i, got.values[s][i], byPush.values[s][i])
				}
			}
		}
	}
	sameCheckpoints(t, "by aggregate", byPush, byAgg)
	sameCheckpoints(t, "by aggregate, ps 1 killed", byPush, hurt)
	if !hurt.killed || hurt.dups < 2 {
		t.Errorf("killed %v, retries recognised %d: want the kill after the aggregate shipped and both workers' retries recognised", hurt.killed, hurt.dups)
	}
	if 2*byAgg.shipped != byPush.shipped {
		t.Errorf("gradient values shipped to backups: %d by aggregate, %d by push; want half", byAgg.shipped, byPush.shipped)
	}
	t.Logf("values shipped to backups: %d by push, %d by aggregate; %s; kill to the first push to shard 1 acknowledged: %v", byPush.shipped, byAgg.shipped, hurt.tookOver, hurt.killToAck)
}

// TestAsyncJobSurvivesTwoKills runs an asynchronous job of 2 workers on 5
// ps with 3 copies of each shard, and kills two ps one after the other,
// each right after a push reached its copies unacknowledged. Every push
// is applied exactly once (each shard's step ends at the number of pushes
// the workers made), and the step a worker pulls never goes back.
func TestAsyncJobSurvivesTwoKills(t *testing.T) {
	const steps = 15
	res := runJob(t, job{n: 5, r: 3, steps: steps, kills: []kill{{ps: 1, step: 3}, {ps: 3, step: 9}}})
	if res.kills != 2 {
		t.Fatalf("%d of 2 ps killed", res.kills)
	}
	for s, st := range res.steps {
		if st != 2*steps {
			t.Errorf("shard %d ends at step %d, want %d (2 workers × %d pushes, each applied once)", s, st, 2*steps, steps)
		}
	}
	if res.dups == 0 {
		t.Errorf("no retry was recognised")
	}
	t.Logf("%s; retries recognised: %d", res.tookOver, res.dups)
}

// sameCheckpoints fails unless every shard's checkpoint (values, optimizer
// slots, update counts, step) is byte for byte the same in both jobs.
func sameCheckpoints(t *testing.T, name string, want, got jobResult) {
	t.Helper()
	for s, w := range want.snaps {
		g := got.snaps[s]
		if g.Step != w.Step || !maps.Equal(g.Meta, w.Meta) || len(g.Tensors) != len(w.Tensors) {
			t.Fatalf("%s: shard %d checkpoint at step %d meta %v with %d tensors, want step %d meta %v with %d", name, s, g.Step, g.Meta, len(g.Tensors), w.Step, w.Meta, len(w.Tensors))
		}
		for i := range w.Tensors {
			if g.Tensors[i].Name != w.Tensors[i].Name || !bytes.Equal(g.Tensors[i].Data, w.Tensors[i].Data) {
				t.Fatalf("%s: shard %d tensor %s differs from the undisturbed job's", name, s, w.Tensors[i].Name)
			}
		}
	}
}

type kill struct {
	ps   int
	step int64 // when worker 0 pushes at this step to a shard ps serves
}

type job struct {
	sync        bool
	aggregate   bool // sync: replicate each step's aggregate, not each push
	n, r, steps int
	kills       []kill
}

type jobResult struct {
	values    map[int][]float32
	steps     map[int]int64
	snaps     map[int]checkpoint.Shard // what a checkpoint of the serving copy would hold
	killed    bool
	kills     int
	shipped   int // gradient values sent to backups
	dups      int // pushes recognised as retries
	tookOver  string
	killToAck time.Duration
	timeout   time.Duration
}

// aggData is a sync step's averaged gradients, the entry of replication
// after aggregation.
type aggData struct {
	step  int64
	grads [][]float32
}

// holdAndApply is a primary's push in replication by aggregate: Hold it,
// apply it to the primary's copy, and when it completes the step log the
// step's aggregate (which the copy's Aggregated hook filled in agg).
func holdAndApply(t *testing.T, nd *Node, sh *shard.Shard, s int, req ReqID, d pushData, agg *aggData, now time.Time) (dup, complete bool, err error) {
	dup, err = nd.Hold(s, req)
	if err != nil || dup {
		return dup, false, err
	}
	p := shard.Push{Worker: d.worker, Step: d.step, Dense: []shard.DenseGrad{{Name: []byte(fmt.Sprintf("v%d", s)), Values: d.grad, Bad: shard.Unchecked}}}
	if err := sh.Check(&p); err != nil {
		t.Fatalf("shard %d: check: %v", s, err)
	}
	res, err := sh.Apply(&p, now, nil)
	if err != nil {
		t.Fatalf("shard %d: apply: %v", s, err)
	}
	if res.Verdict.String() != "complete" {
		return false, false, nil
	}
	if _, err := nd.ProposeHeld(s, aggData{step: agg.step, grads: agg.grads}); err != nil {
		t.Fatalf("shard %d: the step's aggregate: %v", s, err)
	}
	return false, true, nil
}

type pushData struct {
	worker int
	step   int64
	grad   []float32
}

type simWorker struct {
	id      int
	step    int64
	seen    map[int]int64 // per shard: the step last pulled
	params  map[int][]float32
	pushing bool
	grads   map[int][]float32
	acked   map[int]bool
	sent    map[int]bool
	target  map[int]int
	since   map[int]time.Time // when the request to target was sent
}

// runJob runs the job, killing each of j.kills once worker 0's push at
// that step to a shard the ps serves has reached the other copies but is
// not yet acknowledged.
func runJob(t *testing.T, j job) jobResult {
	const workers, size = 2, 5
	n, r, steps := j.n, j.r, int64(j.steps)
	timeout := time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	res := jobResult{values: map[int][]float32{}, steps: map[int]int64{}, snaps: map[int]checkpoint.Shard{}, timeout: timeout}

	nodes := make([]*Node, n)
	copies := make([]map[int]*shard.Shard, n)
	dead := make([]bool, n)
	lastAgg := make([]map[int]*aggData, n)
	for id := range lastAgg {
		lastAgg[id] = map[int]*aggData{}
	}
	dying := -1
	var killedAt time.Time
	for id := range nodes {
		var err error
		if nodes[id], err = New(Config{ID: id, N: n, R: r, Timeout: timeout}); err != nil {
			t.Fatal(err)
		}
		copies[id] = map[int]*shard.Shard{}
		for _, s := range Shards(id, n, r) {
			inc := uint64(0)
			agg := &aggData{}
			lastAgg[id][s] = agg
			sh := shard.New(shard.Config{Task: s, NumPS: n, NumWorkers: workers, Incarnation: func() uint64 { inc++; return inc },
				Aggregated: func(step int64, grads [][]float32, _ []shard.RowGrads) {
					agg.step, agg.grads = step, nil
					for _, g := range grads {
						agg.grads = append(agg.grads, append([]float32(nil), g...))
					}
				}})
			l := shard.Layout{
				Vars:      []shard.VarSpec{{Name: fmt.Sprintf("v%d", s), Shape: []int64{size}}},
				Optimizer: optim.Config{Name: "adam", LearningRate: 0.05},
				Sync:      j.sync, NumWorkers: workers,
			}
			if j.sync {
				l.ReplicasToAggregate = workers
			}
			init := make([]float32, size)
			for i := range init {
				init[i] = float32(s+1) + float32(i)/7
			}
			if _, err := sh.Init(l, [][]float32{init}); err != nil {
				t.Fatal(err)
			}
			copies[id][s] = sh
		}
	}
	acks := map[int]map[ReqID]bool{}
	var queue []Message
	handle := func(id int, rd Ready) {
		for _, e := range rd.Apply {
			sh := copies[id][e.Shard]
			if a, ok := e.Data.(aggData); ok {
				if err := sh.ApplyAggregate(a.step, a.grads, nil); err != nil {
					t.Fatalf("ps %d shard %d: aggregate of entry %d: %v", id, e.Shard, e.Seq, err)
				}
				continue
			}
			d := e.Data.(pushData)
			p := shard.Push{Worker: d.worker, Step: d.step, Dense: []shard.DenseGrad{{Name: []byte(fmt.Sprintf("v%d", e.Shard)), Values: d.grad, Bad: shard.Unchecked}}}
			if err := sh.Check(&p); err != nil {
				t.Fatalf("ps %d shard %d: check of entry %d: %v", id, e.Shard, e.Seq, err)
			}
			if _, err := sh.Apply(&p, start, nil); err != nil {
				t.Fatalf("ps %d shard %d: apply of entry %d: %v", id, e.Shard, e.Seq, err)
			}
		}
		for _, s := range rd.TookOver {
			if res.tookOver != "" {
				res.tookOver += "; "
			}
			res.tookOver += fmt.Sprintf("ps %d took over shards [%d] at step %d", id, s, copies[id][s].Step())
		}
		if id != dying {
			for _, a := range rd.Acked {
				if acks[a.Shard] == nil {
					acks[a.Shard] = map[ReqID]bool{}
				}
				acks[a.Shard][a.Req] = true
				if res.killed && res.killToAck == 0 && a.Shard == j.kills[0].ps {
					res.killToAck = now.Sub(killedAt)
				}
			}
		}
		queue = append(queue, rd.Messages...)
	}
	deliver := func() {
		for range 10000 {
			for id, nd := range nodes {
				if !dead[id] {
					handle(id, nd.Ready())
				}
			}
			if len(queue) == 0 {
				return
			}
			q := queue
			queue = nil
			for _, m := range q {
				if m.Type == Append {
					for _, e := range m.Entries {
						switch d := e.Data.(type) {
						case pushData:
							res.shipped += len(d.grad)
						case aggData:
							for _, g := range d.grads {
								res.shipped += len(g)
							}
						}
					}
				}
				if !dead[m.From] && !dead[m.To] {
					nodes[m.To].Step(m)
				}
			}
			if dying >= 0 { // its last messages went out; it hears nothing more
				if !res.killed {
					killedAt = now
				}
				dead[dying], dying, res.killed = true, -1, true
				res.kills++
			}
		}
		t.Fatal("messages still flowing after 10000 rounds")
	}

	ws := make([]*simWorker, workers)
	for w := range ws {
		ws[w] = &simWorker{id: w, params: map[int][]float32{}, target: map[int]int{}, seen: map[int]int64{}}
		for s := 0; s < n; s++ {
			ws[w].target[s] = s
		}
	}
	// reroute picks the next copy after the target once it was silent for
	// the timeout, or the primary a live ps names.
	reroute := func(w *simWorker, s int, since time.Time) bool {
		to := w.target[s]
		if dead[to] {
			if now.Sub(since) >= timeout {
				m := Members(s, n, r)
				for i, id := range m {
					if id == to {
						w.target[s] = m[(i+1)%len(m)]
					}
				}
				return true
			}
			return false
		}
		if p := nodes[to].Primary(s); p != to && p >= 0 {
			w.target[s] = p
			return true
		}
		return false
	}
	for tick := 0; ; tick++ {
		if tick > 100000 {
			t.Fatalf("the job did not finish: workers at steps %d, %d", ws[0].step, ws[1].step)
		}
		now = now.Add(10 * time.Millisecond)
		for id, nd := range nodes {
			if !dead[id] {
				nd.Tick(now)
			}
		}
		deliver()
		finished := true
		for _, w := range ws {
			if w.step >= steps {
				continue
			}
			finished = false
			if !w.pushing { // pull every shard at w.step
				if w.since == nil {
					w.since = map[int]time.Time{}
				}
				for s := 0; s < n; s++ {
					if w.params[s] != nil {
						continue
					}
					to := w.target[s]
					if _, ok := w.since[s]; !ok {
						w.since[s] = now
					}
					if !dead[to] && nodes[to].Serving(s) && (!j.sync || copies[to][s].Step() >= w.step) {
						if st := copies[to][s].Step(); st < w.seen[s] {
							t.Errorf("worker %d pulled shard %d at step %d after step %d", w.id, s, st, w.seen[s])
						}
						w.seen[s] = copies[to][s].Step()
						l := copies[to][s].Vars()[0].LeaseValues()
						w.params[s] = append([]float32(nil), l.Values()...)
						l.Release()
						delete(w.since, s)
						continue
					}
					if reroute(w, s, w.since[s]) {
						w.since[s] = now
					}
				}
				if len(w.params) < n {
					continue
				}
				w.pushing, w.grads, w.acked, w.sent, w.since = true, map[int][]float32{}, map[int]bool{}, map[int]bool{}, map[int]time.Time{}
				for s, p := range w.params {
					g := make([]float32, len(p))
					for i, x := range p {
						g[i] = x*x*0.3 - float32(w.id+1)*float32(i+1)*0.01 + float32(w.step)*0.001
					}
					w.grads[s] = g
				}
			}
			for s := 0; s < n; s++ {
				req := ReqID{Client: w.id, N: uint64(w.step + 1)}
				if w.acked[s] || acks[s][req] {
					w.acked[s] = true
					continue
				}
				if w.sent[s] {
					if reroute(w, s, w.since[s]) {
						w.sent[s] = false
					}
					continue
				}
				to := w.target[s]
				if dead[to] {
					if _, ok := w.since[s]; !ok {
						w.since[s] = now
					}
					w.sent[s] = true
					continue
				}
				var dup, complete bool
				var err error
				if j.aggregate {
					dup, complete, err = holdAndApply(t, nodes[to], copies[to][s], s, req, pushData{worker: w.id, step: w.step, grad: w.grads[s]}, lastAgg[to][s], start)
				} else {
					_, dup, err = nodes[to].Propose(s, req, pushData{worker: w.id, step: w.step, grad: w.grads[s]})
				}
				if dup {
					res.dups++
				}
				var np *NotPrimaryError
				switch {
				case errors.As(err, &np) && np.Primary >= 0:
					w.target[s] = np.Primary
				case err != nil: // no lease yet, catching up: again next tick
				default:
					w.sent[s], w.since[s] = true, now
					if k := res.kills; k < len(j.kills) && j.kills[k].step == w.step && to == j.kills[k].ps && (j.aggregate && complete || !j.aggregate && w.id == 0) {
						dying = to // its entry reaches the backups; its acks never leave
					}
				}
			}
			deliver()
			if len(w.acked) == n {
				w.step++
				w.pushing, w.params, w.since = false, map[int][]float32{}, nil
			}
		}
		if finished {
			break
		}
	}
	for s := 0; s < n; s++ {
		for _, id := range Members(s, n, r) {
			if !dead[id] && nodes[id].Serving(s) {
				v := copies[id][s].Vars()[0].LeaseValues()
				res.values[s] = append([]float32(nil), v.Values()...)
				v.Release()
				res.steps[s] = copies[id][s].Step()
				res.snaps[s] = copies[id][s].Snapshot()
			}
		}
		if res.values[s] == nil {
			t.Fatalf("no ps serves shard %d at the end", s)
		}
	}
	return res
}
