package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/scenario"
)

// TestScenarios runs the scripts in testdata/ through the project's one
// scenario driver. A cluster of Nodes is wired by a network in the test that
// delivers every message at once, in order, unless an end is killed or cut
// off. Each copy of a shard is a toy state machine: the sum of the values
// pushed and a step that counts the pushes applied. Time is a fake clock
// that only "tick" moves. Commands:
//
//	cluster n=N r=R timeout=D [snapshots=manual]  a fresh cluster; its first tick is at t=0; manual: snapshots for rejoining ps wait for "snapshots"
//	snapshots                          (manual) each primary sends the snapshots asked of it, of its copy as it is now (or as reserve cut it)
//	reserve                            (manual) each primary takes a cut of the copies asked of it (ReserveSnapshot), sent by a later "snapshots" while pushes go on
//	tick D                             the clock moves by D in steps of timeout/10; every live ps ticks
//	push W N V shard=S [to=P]          worker W's N-th push of V to shard S, sent to ps P (default: the primary as the lowest live ps sees it)
//	hold W N V shard=S [to=P]          a sync push by aggregate: ps P holds it and adds V to its copy
//	aggregate shard=S [to=P]           the step completes at ps P: its aggregate (what was held since the last) is logged
//	pull shard=S to=P                  the state ps P serves, or why it does not
//	kill P                             ps P dies: no ticks, nothing in or out
//	restart P                          a new process of ps P starts (a fresh node, another boot, empty copies)
//	same                               every shard's copies that hold a full copy are identical (sum, step, requests)
//	cut P / heal P                     messages between ps P and the other ps are lost / delivered again (workers still reach it)
//	cut P Q / heal P Q                 the same for the link between ps P and ps Q only
//	status                             every ps's view, lease, roles and copies
//	forge TYPE to=P via=V from=F [epoch=E] [votes=X,Y] [removed=X,Y] [boot=B]
//	                                   a message made up by an attacker, over a connection whose peer is ps V
//	                                   (-1: a worker): ps P steps it (StepFrom) and says whether it counted;
//	                                   epoch=E carries the processes as ps F knows them, a re-formation
//	capture TYPE from=F to=P           keep the last TYPE message ps F sent ps P, for replay
//	replay TYPE from=F to=P [via=V]    the captured message delivered again over V's connection (default F)
//
// Output lines are what happened: events, acknowledgements, takeovers
// (with the new primary's step), lost shards. Throughout, the harness
// checks the guarantees: no copy applies a request twice, a shard's step as
// served never goes back, and every acknowledged push is held by the
// primary that takes over.
func TestScenarios(t *testing.T) {
	scenario.Run(t, func() scenario.Runner {
		var c *cluster
		return func(t *testing.T, cmd scenario.Cmd) (string, error) {
			if cmd.Name != "cluster" && c == nil {
				t.Fatalf("%s: %s before cluster", cmd.Where, cmd.Name)
			}
			switch cmd.Name {
			case "cluster":
				d := duration(t, cmd, cmd.KV["timeout"])
				var err error
				c, err = newCluster(t, int(cmd.Int(t, "n", 3)), int(cmd.Int(t, "r", 2)), d)
				if err != nil {
					return "", err
				}
				c.manual = cmd.KV["snapshots"] == "manual"
				c.tick(0)
				return c.flush(), nil
			case "tick":
				d := duration(t, cmd, cmd.Args[0])
				step := c.timeout / 10
				for end := c.now.Add(d); c.now.Before(end); {
					c.tick(min(step, end.Sub(c.now)))
				}
				return c.flush(), nil
			case "push":
				w, k, v := cmd.Arg(t, 0), cmd.Arg(t, 1), cmd.Arg(t, 2)
				s := int(cmd.Int(t, "shard", 0))
				to := int(cmd.Int(t, "to", int64(c.guessPrimary(s))))
				if c.dead[to] {
					return fmt.Sprintf("ps %d: unreachable", to), nil
				}
				seq, dup, err := c.nodes[to].Propose(s, ReqID{Client: int(w), N: uint64(k)}, v)
				c.deliver()
				if err != nil {
					return strings.TrimSpace(c.flush() + "\nps " + fmt.Sprint(to) + ": " + err.Error()), nil
				}
				what := "appended"
				if dup {
					what = "duplicate of"
				}
				return strings.TrimSpace(fmt.Sprintf("ps %d: %s seq=%d\n%s", to, what, seq, c.flush())), nil
			case "hold":
				w, k, v := cmd.Arg(t, 0), cmd.Arg(t, 1), cmd.Arg(t, 2)
				s := int(cmd.Int(t, "shard", 0))
				to := int(cmd.Int(t, "to", int64(c.guessPrimary(s))))
				dup, err := c.nodes[to].Hold(s, ReqID{Client: int(w), N: uint64(k)})
				if err == nil && !dup {
					st := c.state[to][s]
					st.held += v
					st.seen[ReqID{Client: int(w), N: uint64(k)}] = true
				}
				c.deliver()
				if err != nil {
					return strings.TrimSpace(c.flush() + "\nps " + fmt.Sprint(to) + ": " + err.Error()), nil
				}
				return strings.TrimSpace(fmt.Sprintf("ps %d: held (duplicate %v)\n%s", to, dup, c.flush())), nil
			case "aggregate":
				s := int(cmd.Int(t, "shard", 0))
				to := int(cmd.Int(t, "to", int64(c.guessPrimary(s))))
				st := c.state[to][s]
				seq, err := c.nodes[to].ProposeHeld(s, st.held)
				if err == nil {
					st.sum += st.held
					st.step++
					st.held = 0
				}
				c.deliver()
				if err != nil {
					return strings.TrimSpace(c.flush() + "\nps " + fmt.Sprint(to) + ": " + err.Error()), nil
				}
				return strings.TrimSpace(fmt.Sprintf("ps %d: aggregate seq=%d\n%s", to, seq, c.flush())), nil
			case "pull":
				s, to := int(cmd.Int(t, "shard", 0)), int(cmd.Int(t, "to", 0))
				if c.dead[to] {
					return fmt.Sprintf("ps %d: unreachable", to), nil
				}
				if !c.nodes[to].Serving(s) {
					return fmt.Sprintf("ps %d: not serving shard %d (primary by its view: ps %d; applied %d, held by every copy %d)", to, s, c.nodes[to].Primary(s), c.nodes[to].Applied(s), c.nodes[to].shards[s].commit), nil
				}
				st := c.state[to][s]
				c.served(s, st.step)
				return fmt.Sprintf("ps %d: shard %d sum=%d step=%d", to, s, st.sum, st.step), nil
			case "kill":
				c.dead[int(cmd.Arg(t, 0))] = true
				return "", nil
			case "restart":
				id := int(cmd.Arg(t, 0))
				c.boots++
				nd, err := New(Config{ID: id, N: c.n, R: c.r, Timeout: c.timeout, Boot: uint64(100 + c.boots)})
				if err != nil {
					return "", err
				}
				c.nodes[id], c.dead[id], c.cut[id] = nd, false, false
				for _, s := range Shards(id, c.n, c.r) {
					c.state[id][s] = &toy{seen: map[ReqID]bool{}}
				}
				nd.Tick(c.now)
				c.deliver()
				return c.flush(), nil
			case "reserve":
				for i, a := range c.asked {
					st := c.state[a.from][a.Shard]
					seq := c.nodes[a.from].Applied(a.Shard)
					if err := c.nodes[a.from].ReserveSnapshot(a.Shard, a.To, seq); err != nil {
						c.out = append(c.out, fmt.Sprintf("%s ps %d: %v", c.stamp(), a.from, err))
						continue
					}
					c.asked[i].cut = &toy{sum: st.sum, step: st.step, seen: maps.Clone(st.seen)}
					c.asked[i].seq = seq
					c.out = append(c.out, fmt.Sprintf("%s ps %d took a cut of shard %d for ps %d at seq %d (step %d)", c.stamp(), a.from, a.Shard, a.To, seq, st.step))
				}
				c.deliver()
				return c.flush(), nil
			case "snapshots":
				asked := c.asked
				c.asked = nil
				for _, a := range asked {
					st := c.state[a.from][a.Shard]
					snap, seq := &toy{sum: st.sum, step: st.step, seen: maps.Clone(st.seen)}, c.nodes[a.from].Applied(a.Shard)
					if a.cut != nil { // reserved: the copy as it was cut
						snap, seq, st = a.cut, a.seq, a.cut
					}
					if err := c.nodes[a.from].SendSnapshot(a.Shard, a.To, seq, snap); err != nil {
						c.out = append(c.out, fmt.Sprintf("%s ps %d: %v", c.stamp(), a.from, err))
					} else {
						c.out = append(c.out, fmt.Sprintf("%s ps %d sent its copy of shard %d to ps %d (step %d)", c.stamp(), a.from, a.Shard, a.To, st.step))
					}
				}
				c.deliver()
				return c.flush(), nil
			case "same":
				return c.same(), nil
			case "cut", "heal":
				a := int(cmd.Arg(t, 0))
				if len(cmd.Args) == 1 {
					c.cut[a] = cmd.Name == "cut"
					return "", nil
				}
				b := int(cmd.Arg(t, 1))
				c.links[[2]int{min(a, b), max(a, b)}] = cmd.Name == "cut"
				return "", nil
			case "status":
				return c.status(), nil
			case "forge", "replay":
				return c.forge(cmd), nil
			case "capture":
				var ok bool
				k := c.msgKey(cmd)
				if c.captured[k], ok = c.last[k]; !ok {
					t.Fatalf("%s: ps %d sent ps %d no %s", cmd.Where, k[0], k[1], msgNames[k[2]])
				}
				return "", nil
			}
			t.Fatalf("%s: unknown command %q", cmd.Where, cmd.Name)
			return "", nil
		}
	})
}

func duration(t *testing.T, cmd scenario.Cmd, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: duration %q: %v", cmd.Where, s, err)
	}
	return d
}

type askedSnap struct {
	SnapshotReq
	from int
	cut  *toy   // reserve: the copy as it was cut, at seq
	seq  uint64 // the cut's seq
}

type toy struct {
	sum, step int64
	held      int64 // a primary's sum of the pushes held for the next aggregate
	seen      map[ReqID]bool
}

type cluster struct {
	t        *testing.T
	n, r     int
	timeout  time.Duration
	start    time.Time
	now      time.Time
	nodes    []*Node
	state    []map[int]*toy
	dead     []bool
	cut      []bool
	links    map[[2]int]bool // links cut
	queue    []Message
	boots    int
	manual   bool
	asked    []askedSnap
	out      []string
	acked    map[int]uint64     // per shard: highest seq acknowledged
	last     map[[3]int]Message // the last message of each (from, to, type) delivered
	captured map[[3]int]Message // for replay
	maxStep  map[int]int64      // per shard: highest step served
}

func newCluster(t *testing.T, n, r int, timeout time.Duration) (*cluster, error) {
	c := &cluster{t: t, n: n, r: r, timeout: timeout, dead: make([]bool, n), cut: make([]bool, n),
		acked: map[int]uint64{}, maxStep: map[int]int64{}, links: map[[2]int]bool{}, last: map[[3]int]Message{}, captured: map[[3]int]Message{}}
	c.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = c.start
	for id := 0; id < n; id++ {
		nd, err := New(Config{ID: id, N: n, R: r, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		nd.boot = uint64(id + 1)
		st := map[int]*toy{}
		for _, s := range Shards(id, n, r) {
			st[s] = &toy{seen: map[ReqID]bool{}}
		}
		c.state = append(c.state, st)
	}
	return c, nil
}

func (c *cluster) up(id int) bool { return !c.dead[id] && !c.cut[id] }

// guessPrimary is the primary of s as the lowest-numbered live ps sees it.
func (c *cluster) guessPrimary(s int) int {
	for id, nd := range c.nodes {
		if !c.dead[id] && !nd.Stopped() {
			return nd.Primary(s)
		}
	}
	return 0
}

func (c *cluster) tick(d time.Duration) {
	c.now = c.now.Add(d)
	for id, nd := range c.nodes {
		if !c.dead[id] {
			nd.Tick(c.now)
		}
	}
	c.deliver()
	for s := 0; s < c.n; s++ {
		var serving []int
		for id, nd := range c.nodes {
			if !c.dead[id] && nd.Serving(s) {
				serving = append(serving, id)
			}
		}
		if len(serving) > 1 {
			c.t.Errorf("%s: shard %d has two primaries serving: ps %v", c.stamp(), s, serving)
		}
	}
}

// deliver runs every live node's Ready and delivers messages until quiet.
func (c *cluster) deliver() {
	for range 100000 {
		for id, nd := range c.nodes {
			if !c.dead[id] {
				c.handle(id, nd.Ready())
			}
		}
		if len(c.queue) == 0 {
			return
		}
		q := c.queue
		c.queue = nil
		for _, m := range q {
			if c.up(m.From) && c.up(m.To) && !c.links[[2]int{min(m.From, m.To), max(m.From, m.To)}] {
				c.last[[3]int{m.From, m.To, int(m.Type)}] = m
				if err := c.nodes[m.To].StepFrom(m.From, m); err != nil {
					c.t.Errorf("%s: ps %d refused a message of ps %d: %v", c.stamp(), m.To, m.From, err)
				}
			}
		}
	}
	c.t.Fatalf("messages still flowing after 100000 rounds")
}

func (c *cluster) msgKey(cmd scenario.Cmd) [3]int {
	typ := -1
	for i, name := range msgNames {
		if len(cmd.Args) > 0 && name == cmd.Args[0] {
			typ = i
		}
	}
	if typ < 0 {
		c.t.Fatalf("%s: %s: want a message type (%v)", cmd.Where, cmd.Name, msgNames)
	}
	return [3]int{int(cmd.Int(c.t, "from", 0)), int(cmd.Int(c.t, "to", 0)), typ}
}

// forge delivers an attacker's message (forge) or a copy of one sent
// before (replay) and says what became of it.
func (c *cluster) forge(cmd scenario.Cmd) string {
	t := c.t
	k := c.msgKey(cmd)
	from, to, typ := k[0], k[1], k[2]
	via := int(cmd.Int(t, "via", int64(from)))
	var m Message
	if cmd.Name == "replay" {
		var ok bool
		if m, ok = c.captured[k]; !ok {
			t.Fatalf("%s: no %s from ps %d to ps %d captured", cmd.Where, msgNames[typ], from, to)
		}
	} else {
		m = Message{Type: MsgType(typ), From: from, To: to, Sent: c.now, Boot: uint64(cmd.Int(t, "boot", int64(c.nodes[from].boot)))}
		list := func(k string) []int {
			var out []int
			for _, f := range strings.Split(cmd.KV[k], ",") {
				if f != "" {
					var x int
					fmt.Sscan(f, &x)
					out = append(out, x)
				}
			}
			return out
		}
		m.Votes, m.Removed = list("votes"), list("removed")
		if e := cmd.Int(t, "epoch", 0); e > 0 {
			m.Epoch = uint64(e)<<8 | uint64(from)
			m.Boots = make([]uint64, c.n)
			for id, nd := range c.nodes {
				m.Boots[id] = nd.boot
			}
			m.Boots[from] = m.Boot
		}
	}
	before := c.status()
	err := c.nodes[to].StepFrom(via, m)
	c.deliver()
	out := c.flush()
	what := "counted"
	if err != nil {
		what = err.Error()
	}
	if after := c.status(); after == before {
		what += "; nothing changed"
	}
	return strings.TrimSpace(fmt.Sprintf("ps %d: %s\n%s", to, what, out))
}

func (c *cluster) stamp() string {
	return fmt.Sprintf("t=%.2fs", c.now.Sub(c.start).Seconds())
}

func (c *cluster) handle(id int, rd Ready) {
	if r := rd.Reformed; r != nil {
		// Every copy falls back to the checkpoint: here, the empty state.
		// The served steps and acknowledgements start again with it.
		for _, s := range Shards(id, c.n, c.r) {
			c.state[id][s] = &toy{seen: map[ReqID]bool{}}
		}
		c.out = append(c.out, fmt.Sprintf("%s ps %d: restored its copies from the checkpoint (epoch %d)", c.stamp(), id, r.Epoch>>8))
		clear(c.maxStep)
		clear(c.acked)
	}
	for _, e := range rd.Install {
		snap := e.Data.(*toy)
		c.state[id][e.Shard] = &toy{sum: snap.sum, step: snap.step, seen: maps.Clone(snap.seen)}
		c.out = append(c.out, fmt.Sprintf("%s ps %d installed a copy of shard %d at seq %d (step %d)", c.stamp(), id, e.Shard, e.Seq, snap.step))
	}
	for _, e := range rd.Apply {
		st := c.state[id][e.Shard]
		for _, r := range e.Reqs {
			if st.seen[r] {
				c.t.Errorf("ps %d applied request %v of shard %d twice", id, r, e.Shard)
			}
			st.seen[r] = true
		}
		st.sum += e.Data.(int64)
		st.step++
	}
	for _, ev := range rd.Events {
		c.out = append(c.out, c.stamp()+" "+ev)
	}
	for _, s := range rd.TookOver {
		st := c.state[id][s]
		c.out = append(c.out, fmt.Sprintf("%s ps %d took over shards [%d] at step %d", c.stamp(), id, s, st.step))
		if c.nodes[id].Applied(s) < c.acked[s] {
			c.t.Errorf("ps %d took over shard %d holding seq %d, but seq %d was acknowledged", id, s, c.nodes[id].Applied(s), c.acked[s])
		}
		c.served(s, st.step)
	}
	for _, s := range rd.Lost {
		c.out = append(c.out, fmt.Sprintf("%s ps %d: shard %d lost", c.stamp(), id, s))
	}
	for _, sr := range rd.Snapshots {
		if c.manual {
			c.asked = append(c.asked, askedSnap{SnapshotReq: sr, from: id})
			continue
		}
		st := c.state[id][sr.Shard]
		snap := &toy{sum: st.sum, step: st.step, seen: maps.Clone(st.seen)}
		if err := c.nodes[id].SendSnapshot(sr.Shard, sr.To, sr.Seq, snap); err != nil {
			c.out = append(c.out, fmt.Sprintf("%s ps %d: %v", c.stamp(), id, err))
		}
	}
	for _, a := range rd.Acked {
		c.out = append(c.out, fmt.Sprintf("%s ps %d acked shard %d req %v seq=%d", c.stamp(), id, a.Shard, a.Req, a.Seq))
		c.acked[a.Shard] = max(c.acked[a.Shard], a.Seq)
	}
	c.queue = append(c.queue, rd.Messages...)
}

// same checks that the copies of each shard held in full by live ps are
// identical.
func (c *cluster) same() string {
	var lines []string
	for s := 0; s < c.n; s++ {
		var who []string
		var first *toy
		for _, id := range Members(s, c.n, c.r) {
			nd := c.nodes[id]
			ss := nd.shards[s]
			if c.dead[id] || nd.Stopped() || nd.Joining() || nd.removed[id] || !ss.in || ss.lost {
				continue
			}
			st := c.state[id][s]
			if first == nil {
				first = st
			} else if st.sum != first.sum || st.step != first.step || !maps.Equal(st.seen, first.seen) {
				c.t.Errorf("shard %d: copies differ: ps %s holds %d/%d, ps %d holds %d/%d", s, who[0], first.sum, first.step, id, st.sum, st.step)
			}
			who = append(who, fmt.Sprint(id))
		}
		if first != nil {
			lines = append(lines, fmt.Sprintf("shard %d: %d full copies (ps %s): sum=%d step=%d", s, len(who), strings.Join(who, " "), first.sum, first.step))
		} else {
			lines = append(lines, fmt.Sprintf("shard %d: no full copy", s))
		}
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) served(s int, step int64) {
	if step < c.maxStep[s] {
		c.t.Errorf("shard %d went back from step %d to %d", s, c.maxStep[s], step)
	}
	c.maxStep[s] = max(c.maxStep[s], step)
}

func (c *cluster) flush() string {
	out := strings.Join(c.out, "\n")
	c.out = nil
	return out
}

func (c *cluster) status() string {
	var lines []string
	for id, nd := range c.nodes {
		switch {
		case c.dead[id]:
			lines = append(lines, fmt.Sprintf("ps %d: dead", id))
			continue
		case nd.Stopped():
			lines = append(lines, fmt.Sprintf("ps %d: stopped (removed)", id))
			continue
		case nd.Joining():
			lines = append(lines, fmt.Sprintf("ps %d: joining (a new process, not yet readmitted)", id))
			continue
		}
		lease := "none"
		if nd.leased() {
			lease = "held"
		}
		var prim, parts []string
		for _, s := range nd.shardIDs() {
			if nd.Serving(s) {
				prim = append(prim, fmt.Sprint(s))
			}
			st := c.state[id][s]
			copying := ""
			if ss := nd.shards[s]; !ss.in && !ss.lost {
				copying = "(copying)"
			}
			parts = append(parts, fmt.Sprintf("s%d=%d/%d%s", s, st.sum, st.step, copying))
		}
		removed := sortedKeys(nd.removed)
		cut := ""
		if c.cut[id] {
			cut = " (cut off)"
		}
		inc := ""
		if g := nd.Gen(id); g > 0 {
			inc = fmt.Sprintf(" (incarnation %d)", g)
		}
		lines = append(lines, fmt.Sprintf("ps %d%s%s: view=%d removed=%v lease=%s serving=[%s] copies %s",
			id, inc, cut, nd.View(), removed, lease, strings.Join(prim, " "), strings.Join(parts, " ")))
	}
	return strings.Join(lines, "\n")
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ID: 0, N: 0, R: 1, Timeout: time.Second}, "0 ps"},
		{Config{ID: 3, N: 3, R: 1, Timeout: time.Second}, "ps 3 out of range 0..2"},
		{Config{ID: 0, N: 3, R: 4, Timeout: time.Second}, "4 replicas with 3 ps: want 1..3"},
		{Config{ID: 0, N: 3, R: 0, Timeout: time.Second}, "0 replicas"},
		{Config{ID: 0, N: 3, R: 2}, "failover timeout 0s"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestRing(t *testing.T) {
	if got := Members(2, 3, 2); !slices.Equal(got, []int{2, 0}) {
		t.Errorf("Members(2, 3, 2) = %v, want [2 0]", got)
	}
	if got := Shards(0, 3, 2); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Shards(0, 3, 2) = %v, want [0 2]", got)
	}
	var np *NotPrimaryError
	err := error(&NotPrimaryError{Shard: 1, Primary: 2})
	if !errors.As(err, &np) || !errors.Is(err, ErrNotPrimary) {
		t.Errorf("NotPrimaryError does not unwrap to ErrNotPrimary")
	}
}
