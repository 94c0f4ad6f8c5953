package tier

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// A full disk stops the tier with an error that says so: pebble's failed
// flush (which it would retry for ever, stalling writes once its memtables
// are full) fails the next round and every later fetch, and the store
// still closes.
func TestFullDiskStopsTheTier(t *testing.T) { forEachEngine(t, testFullDiskStopsTheTier) }

func testFullDiskStopsTheTier(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
		}
		return nil
	})}
	m, err := Open(Config{Dir: "store", Budget: 0, FS: errorfs.Wrap(vfs.NewMem(), full)})
	if err != nil {
		t.Fatal(err)
	}
	rule, _ := optim.New(optim.Config{Name: "adagrad", LearningRate: 0.1})
	hot, _ := sparse.New(sparse.Config{Dim: 8, Rule: rule})
	tt := m.Attach([]string{"emb"}, []*sparse.Table{hot})[0].(attached).Table
	var mu sync.Mutex
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = uint64(i)
	}
	mu.Lock()
	if err := hot.Push(keys, make([]float32, 8*len(keys)), 1); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()
	if err := m.Round(&mu, time.Now()); err != nil {
		t.Fatalf("round before the disk filled: %v", err)
	}
	full.On()
	if e := m.store.pebble; e != nil {
		if _, err := e.db.AsyncFlush(); err != nil {
			t.Fatal(err)
		}
		// The flush fails in pebble's background; wait for it to be seen
		// (bounded: 10000 looks).
		for i := 0; m.store.Err() == nil; i++ {
			if i == 10000 {
				t.Fatal("the failed flush was never reported")
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		// The hash store writes in the round: new rows to demote.
		for i := range keys {
			keys[i] += uint64(len(keys))
		}
		mu.Lock()
		if err := hot.Push(keys, make([]float32, 8*len(keys)), 2); err != nil {
			t.Fatal(err)
		}
		mu.Unlock()
	}
	err = m.Round(&mu, time.Now())
	if !errors.Is(err, ErrStore) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("round on a full disk: %v, want ErrStore wrapping ENOSPC", err)
	}
	mu.Lock()
	err = tt.Fetch([]uint64{1, 2, 3, 6000})
	mu.Unlock()
	if !errors.Is(err, ErrStore) {
		t.Fatalf("fetch on a full disk: %v, want ErrStore", err)
	}
	full.Off()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}
