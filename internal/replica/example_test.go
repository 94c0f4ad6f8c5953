package replica_test

import (
	"fmt"
	"time"

	"github.com/paramserv/paramserv/internal/replica"
)

// Three ps, two copies of each shard. The caller's loop: tick every node,
// hand each node's messages to their receivers, apply entries to the
// local state, and answer acknowledged pushes. ps 0 is then killed; after
// the timeout ps 1 takes shard 0 over with every acknowledged push.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := make([]*replica.Node, 3)
	sums := make([]map[int]int, 3) // each ps's copy of each shard: a sum
	for id := range nodes {
		nodes[id], _ = replica.New(replica.Config{ID: id, N: 3, R: 2, Timeout: time.Second})
		sums[id] = map[int]int{}
	}
	dead := map[int]bool{}
	pump := func() {
		for {
			var q []replica.Message
			for id, nd := range nodes {
				if dead[id] {
					continue
				}
				rd := nd.Ready()
				for _, e := range rd.Apply {
					sums[id][e.Shard] += e.Data.(int)
				}
				for _, a := range rd.Acked {
					fmt.Printf("ps %d acknowledges push %v to shard %d\n", id, a.Req, a.Shard)
				}
				for _, s := range rd.TookOver {
					fmt.Printf("ps %d took over shard %d holding sum %d\n", id, s, sums[id][s])
				}
				q = append(q, rd.Messages...)
			}
			if len(q) == 0 {
				return
			}
			for _, m := range q {
				if !dead[m.From] && !dead[m.To] {
					nodes[m.To].Step(m)
				}
			}
		}
	}
	tick := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(100 * time.Millisecond) {
			for id, nd := range nodes {
				if !dead[id] {
					nd.Tick(now)
				}
			}
			pump()
		}
	}
	tick(300 * time.Millisecond) // the first heartbeats grant the leases
	nodes[0].Propose(0, replica.ReqID{Client: 7, N: 1}, 5)
	pump()
	dead[0] = true
	tick(1500 * time.Millisecond)
	_, dup, _ := nodes[1].Propose(0, replica.ReqID{Client: 7, N: 1}, 5) // a retry
	pump()
	fmt.Println("retry recognised:", dup, "sum:", sums[1][0])
	// Output:
	// ps 0 acknowledges push 7:1 to shard 0
	// ps 1 took over shard 0 holding sum 5
	// ps 1 acknowledges push 7:1 to shard 0
	// retry recognised: true sum: 5
}
