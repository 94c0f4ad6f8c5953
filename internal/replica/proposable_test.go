package replica

import (
	"testing"
	"time"
)

// TestProposableWhileEarlierPushesInFlight: a primary takes a second push
// while the first is not yet held by its backup (Proposable), though it
// may not answer pulls until both are (Serving); a backup takes none.
func TestProposableWhileEarlierPushesInFlight(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := make([]*Node, 3)
	for id := range nodes {
		var err error
		if nodes[id], err = New(Config{ID: id, N: 3, R: 2, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	var acked []Ack
	var held []Message // messages not delivered yet
	collect := func() {
		for _, nd := range nodes {
			rd := nd.Ready()
			acked = append(acked, rd.Acked...)
			held = append(held, rd.Messages...)
		}
	}
	pump := func() {
		for collect(); len(held) > 0; collect() {
			q := held
			held = nil
			for _, m := range q {
				nodes[m.To].Step(m)
			}
		}
	}
	for range 3 { // the first heartbeats grant the leases
		for _, nd := range nodes {
			nd.Tick(now)
		}
		pump()
		now = now.Add(100 * time.Millisecond)
	}
	p, b := nodes[0], nodes[1] // shard 0: primary ps 0, backup ps 1
	if !p.Proposable(0) || !p.Serving(0) {
		t.Fatalf("leased primary: Proposable %v, Serving %v; want both", p.Proposable(0), p.Serving(0))
	}
	if b.Proposable(0) {
		t.Fatalf("the backup of shard 0 says it takes pushes for it")
	}
	if _, _, err := p.Propose(0, ReqID{Client: 1, N: 1}, 1); err != nil {
		t.Fatal(err)
	}
	collect() // the append is out, not delivered
	if p.Serving(0) {
		t.Errorf("Serving with a push its backup does not hold")
	}
	if !p.Proposable(0) {
		t.Fatalf("not Proposable with a push in flight: a second push would wait for the first's round trip")
	}
	if _, _, err := p.Propose(0, ReqID{Client: 2, N: 1}, 2); err != nil {
		t.Fatalf("second push while the first is in flight: %v", err)
	}
	if len(acked) != 0 {
		t.Fatalf("acknowledged %v before the backup held anything", acked)
	}
	pump()
	if len(acked) != 2 || acked[0].Seq != 1 || acked[1].Seq != 2 {
		t.Fatalf("acknowledged %v, want both pushes, in log order", acked)
	}
	if !p.Serving(0) || b.Applied(0) != 2 {
		t.Fatalf("after delivery: primary Serving %v, backup holds %d entries; want true, 2", p.Serving(0), b.Applied(0))
	}
}
