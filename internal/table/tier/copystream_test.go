package tier

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/shard"
)

// A replica's copy of a shard whose table is many times its budget is
// written (CopyCut.WriteTo) and read (DecodeCopyFrom, into a copy with a
// disk tier) a piece at a time: the heap grows by the rows in memory and
// fixed buffers, not with the table, on either side (a table four times
// larger, under the same budget, grows it by far less than the extra
// rows); the copy holds the shard's rows bit for bit, and WriteTo writes
// Encode's bytes.
func TestStreamedCopyStaysInBudget(t *testing.T) {
	small := 100_000
	if testing.Short() {
		small = 50_000
	}
	const rowBytes = 8 + 8*4*2 + 8 + 8
	budget := int64(small) * rowBytes / 10
	type growth struct{ table, send, recv int64 }
	measure := func(rows int) growth {
		const step = 10_000
		rng := rand.New(rand.NewPCG(9, uint64(rows)))
		keys := make([]uint64, rows)
		for i := range keys {
			keys[i] = rng.Uint64()
		}
		dir := t.TempDir()
		m := writeCkpt(t, dir, step, -1, -1, []checkpoint.Shard{makeRows(rng, keys, step).shardOf(step, true, false, 0, nil)})
		storeDir := t.TempDir() + "/s"
		mgr, err := Open(Config{Dir: storeDir, Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer mgr.Close()
		tiered := restoreShard(t, dir, m, mgr, nil)
		ref := restoreShard(t, dir, m, nil, nil)
		if s := mgr.Stats(); s.DiskRows < int64(rows)*8/10 {
			t.Fatalf("%d of %d rows on disk, want most", s.DiskRows, rows)
		}
		path := filepath.Join(t.TempDir(), "copy")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cut := tiered.CutCopy()
		send, _ := heapPeak(func() {
			_, err = cut.WriteTo(f)
			cut.Release()
		})
		if err != nil {
			t.Fatal(err)
		}
		size, err := f.Seek(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if left, err := filepath.Glob(filepath.Join(storeDir, "cut-*")); err != nil || len(left) > 0 {
			t.Errorf("the tier's column files left after the copy: %v (%v)", left, err)
		}
		mgr2, err := Open(Config{Dir: t.TempDir() + "/s", Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer mgr2.Close()
		copied := shard.New(shard.Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }, Tiers: mgr2})
		recv, _ := heapPeak(func() { err = copied.DecodeCopyFrom(f, size, time.Unix(0, 0)) })
		if err != nil {
			t.Fatal(err)
		}
		if s := mgr2.Stats(); s.DiskRows < int64(rows)*8/10 {
			t.Errorf("the copy holds %d of %d rows on disk, want most", s.DiskRows, rows)
		}
		want := ref.Cut().Shard()
		if err := checkpoint.DiffTensors(likeRef(copied.Cut().Shard(), want), want); err != nil {
			t.Errorf("the copy of %d rows differs from the shard: %v", rows, err)
		}
		// The same bytes as Encode's, which the replicas send.
		cut = tiered.CutCopy()
		b, err := cut.Encode()
		cut.Release()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != string(b) {
			t.Errorf("WriteTo wrote %d bytes, Encode %d, not the same (%v)", len(got), len(b), err)
		}
		g := growth{table: int64(rows) * rowBytes, send: int64(send), recv: int64(recv)}
		t.Logf("table %.1f MiB, budget %.1f MiB: writing the copy grew the heap by %.1f MiB, reading it into a disk tier by %.1f MiB",
			mib(g.table), mib(budget), mib(g.send), mib(g.recv))
		return g
	}
	a, b := measure(small), measure(4*small)
	more := b.table - a.table
	// Reading keeps what the tier keeps of each row on disk in memory
	// after any load (the miss filter's ten bits a key, the hash store's
	// directory: about 16 bytes a row here), so it may grow by a quarter
	// of the extra rows; gathering them would grow it by all of them.
	for _, c := range []struct {
		what       string
		got, first int64
		part       int64
	}{{"writing", b.send, a.send, 8}, {"reading", b.recv, a.recv, 4}} {
		if c.got-c.first > more/c.part {
			t.Errorf("%s the copy of a table %.1f MiB larger grew the heap by %.1f MiB more (%.1f MiB against %.1f), want at most 1/%d of the extra rows",
				c.what, mib(more), mib(c.got-c.first), mib(c.got), mib(c.first), c.part)
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
