package tier

import (
	"fmt"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// TestFetchKeepsMemoryWithinBudget grows a table fast (many new keys a
// push) with the background loop never running, or with its write left
// out between pushes (a slow round): the rows in memory, pending and in
// flight, must never pass the budget and its margin.
func TestFetchKeepsMemoryWithinBudget(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		for _, roundOut := range []bool{false, true} {
			t.Run(fmt.Sprintf("round_out=%v", roundOut), func(t *testing.T) {
				testFetchKeepsMemoryWithinBudget(t, roundOut)
			})
		}
	})
}

func testFetchKeepsMemoryWithinBudget(t *testing.T, roundOut bool) {
	const dim, perPush, pushes = 4, 2000, 60
	rowBytes := int64(8 + 4*dim*2 + 14) // Adagrad: one state slot
	budget := int64(20000) * rowBytes
	m, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rule, err := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	hot, err := sparse.New(sparse.Config{Dim: dim, Rule: rule})
	if err != nil {
		t.Fatal(err)
	}
	tt := m.Attach([]string{"emb"}, []*sparse.Table{hot})[0].(attached).Table
	if tt.RowBytes() != rowBytes {
		t.Fatalf("row bytes %d, want %d", tt.RowBytes(), rowBytes)
	}
	limit := budget + boundMargin(budget)
	var peak int64
	var flight *Flight
	for p := range pushes {
		if roundOut && flight == nil {
			// A round of the loop: demotes to the budget, and its write
			// is not done before the next pushes.
			if over := int64(hot.Len())*rowBytes - budget; over > 0 {
				tt.Demote(int(over / rowBytes))
			}
			flight = tt.StartFlush()
		}
		keys := make([]uint64, perPush)
		for i := range keys {
			keys[i] = uint64(p*perPush + i) // every key new
		}
		if p > 0 {
			keys = append(keys, uint64((p-1)*perPush+1)) // and one of the last push's
		}
		if err := tt.Fetch(keys); err != nil {
			t.Fatal(err)
		}
		if err := hot.Push(keys, make([]float32, len(keys)*dim), int64(p+1)); err != nil {
			t.Fatal(err)
		}
		held := m.bound.held()
		peak = max(peak, held)
		if held > limit {
			t.Fatalf("push %d: %d bytes of rows in memory (%d hot, %d pending, %d in flight), over the budget %d and its margin (%d)",
				p, held, hot.Len(), len(tt.pend), len(tt.flight), budget, limit)
		}
		if flight != nil && tt.flying != flight {
			flight = nil // a request wrote it
		}
	}
	if flight != nil {
		tt.EndFlush(flight, flight.Write())
	}
	if got := m.Stats().Stalls; got == 0 {
		t.Errorf("no request demoted on its path")
	}
	if n := int64(hot.Len()) + tt.Stats().DiskRows; n != pushes*perPush {
		t.Errorf("%d rows in both tiers, want %d", n, pushes*perPush)
	}
	t.Logf("peak %d bytes of rows in memory, budget %d, limit %d; %d stalls", peak, budget, limit, m.Stats().Stalls)
}
