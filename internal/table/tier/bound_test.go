package tier

import (
	"fmt"
	"sync"
	"testing"
	"time"

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

// TestLoopGathersWrites: the loop's round (gather) leaves a table's rows
// moved out pending until they are a batch (about a page each, within
// half the bound's margin), then writes them all; Round writes at once.
func TestLoopGathersWrites(t *testing.T) {
	const dim = 4
	rowBytes := int64(8 + 4*dim*2 + 14)
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
	var mu sync.Mutex
	key := uint64(0)
	push := func(n int) {
		keys := make([]uint64, n)
		for i := range keys {
			key++
			keys[i] = key
		}
		if err := tt.Fetch(keys); err != nil {
			t.Fatal(err)
		}
		if err := hot.Push(keys, make([]float32, dim*n), 1); err != nil {
			t.Fatal(err)
		}
	}
	push(60000) // 40,000 rows to disk: about 900 pages
	if err := m.Round(&mu, time.Now()); err != nil {
		t.Fatal(err)
	}
	batch := tt.batch()
	if want := int(boundMargin(budget) / (2 * rowBytes)); batch <= 0 || batch > want {
		t.Fatalf("batch %d, want 1 to %d", batch, want)
	}
	wrote, kept := 0, 0
	for range 200 {
		push(batch / 4)
		before := tt.Pending()
		if err := m.round(&mu, time.Now(), true); err != nil {
			t.Fatal(err)
		}
		switch after := tt.Pending(); {
		case before == 0:
			// The bound wrote them on the request's path.
		case after == 0:
			wrote++
		case after >= before:
			kept++
		case after < before:
			t.Fatalf("round wrote part of the pending changes: %d left of %d", after, before)
		case after > batch+batch/4+1:
			t.Fatalf("%d changes pending, over a batch of %d", after, batch)
		}
	}
	if wrote == 0 || kept < 2*wrote {
		t.Fatalf("of 200 rounds, %d wrote and %d kept the changes pending: want a write every 4 or 5", wrote, kept)
	}
	push(batch / 4)
	if err := m.Round(&mu, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := tt.Pending(); n != 0 {
		t.Fatalf("Round left %d changes pending", n)
	}
}
