package replica

import (
	"testing"
	"time"
)

// BenchmarkPushAck measures the protocol's own work for one push with 2
// copies on 3 ps: Propose at the primary, the append to the backup and its
// answer, and the acknowledgement, with messages handed over in memory.
// The payload is not copied by the core, so the figure is the same for
// any push size; it is what replication adds beside shipping the bytes.
func BenchmarkPushAck(b *testing.B) {
	nodes := make([]*Node, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for id := range nodes {
		nodes[id], _ = New(Config{ID: id, N: 3, R: 2, Timeout: time.Second})
	}
	pump := func() (acks int) {
		for {
			var q []Message
			for _, nd := range nodes {
				rd := nd.Ready()
				q = append(q, rd.Messages...)
				acks += len(rd.Acked)
			}
			if len(q) == 0 {
				return acks
			}
			for _, m := range q {
				nodes[m.To].Step(m)
			}
		}
	}
	for _, nd := range nodes {
		nd.Tick(now)
	}
	pump()
	data := []float32{1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%1000 == 0 { // heartbeats keep the lease
			now = now.Add(time.Millisecond)
			for _, nd := range nodes {
				nd.Tick(now)
			}
			pump()
		}
		if _, _, err := nodes[0].Propose(0, ReqID{Client: 0, N: uint64(i + 1)}, data); err != nil {
			b.Fatal(err)
		}
		if pump() != 1 {
			b.Fatal("push not acknowledged")
		}
	}
}
