package shard

import (
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/table/sparse"
)

// TestResolveRows: looking a later batch's keys up ahead of the push before
// its pull (what a standalone job does while its model computes) ends with
// the same rows, values and table statistics as pushing and then pulling
// with no lookup ahead; tables where a lookup may be refused or stamped,
// and synchronous layouts, are left to the pull.
func TestResolveRows(t *testing.T) {
	run := func(ahead bool) ([]float32, sparse.Stats) {
		sh := New(Config{NumWorkers: 1})
		l := Layout{Tables: []TableSpec{{Name: "emb", Dim: 2, Initializer: "normal", InitStddev: 0.1, Seed: 3}}, Optimizer: optim.Config{Name: "ftrl", LearningRate: 0.1}, NumWorkers: 1}
		if _, err := sh.Init(l, nil); err != nil {
			t.Fatal(err)
		}
		name := []byte("emb")
		batches := [][]uint64{{1, 2, 3}, {3, 4, 5, 1}, {5, 6, 7}, {7, 1, 8}}
		sets := make([]*sparse.KeySet, len(batches))
		var out []float32
		for i, keys := range batches {
			sets[i] = sparse.NewKeySet(keys)
			vals := make([]float32, 2*len(keys))
			if err := sh.PullRows(name, nil, sets[i], false, vals); err != nil {
				t.Fatal(err)
			}
			out = append(out, vals...)
			if ahead && i+1 < len(batches) {
				next := sparse.NewKeySet(batches[i+1])
				if ok, err := sh.ResolveRows(name, next); err != nil || !ok {
					t.Fatalf("ResolveRows: %v, %v", ok, err)
				}
			}
			g := make([]float32, 2*len(keys))
			for j := range g {
				g[j] = float32(j+i) * 0.3
			}
			p := &Push{Worker: 0, Step: int64(i), Sparse: []SparseGrad{{Table: name, Set: sets[i], Values: g, Bad: -1}}}
			if err := sh.Check(p); err != nil {
				t.Fatal(err)
			}
			if _, err := sh.Apply(p, time.Time{}, nil); err != nil {
				t.Fatal(err)
			}
		}
		all := make([]float32, 2*8)
		if err := sh.PullRows(name, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, nil, false, all); err != nil {
			t.Fatal(err)
		}
		return append(out, all...), sh.st.tables["emb"].t.Stats()
	}
	want, wantStats := run(false)
	got, gotStats := run(true)
	if !slices.Equal(got, want) {
		t.Errorf("with lookups ahead: %v\nwithout: %v", got, want)
	}
	if gotStats != wantStats {
		t.Errorf("stats with lookups ahead %+v, without %+v", gotStats, wantStats)
	}

	for _, c := range []struct {
		name string
		cfg  Config
		spec TableSpec
		sync bool
	}{
		{"min_count", Config{NumWorkers: 1}, TableSpec{Name: "emb", Dim: 1, MinCount: 2}, false},
		{"evict", Config{NumWorkers: 1}, TableSpec{Name: "emb", Dim: 1, EvictAfterSteps: 10}, false},
		{"key cap", Config{NumWorkers: 1, MaxTableKeys: 100}, TableSpec{Name: "emb", Dim: 1}, false},
		{"sync", Config{NumWorkers: 1}, TableSpec{Name: "emb", Dim: 1}, true},
	} {
		sh := New(c.cfg)
		l := Layout{Tables: []TableSpec{c.spec}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1, Sync: c.sync, ReplicasToAggregate: 1}
		if _, err := sh.Init(l, nil); err != nil {
			t.Fatal(err)
		}
		if ok, err := sh.ResolveRows([]byte("emb"), sparse.NewKeySet([]uint64{1, 2})); ok || err != nil {
			t.Errorf("%s: ResolveRows = %v, %v; want false, nil", c.name, ok, err)
		}
		if n := sh.st.tables["emb"].t.Len(); n != 0 {
			t.Errorf("%s: ResolveRows made %d rows", c.name, n)
		}
	}
	if _, err := New(Config{NumWorkers: 1}).ResolveRows([]byte("none"), sparse.NewKeySet(nil)); err == nil {
		t.Error("ResolveRows of an unknown table succeeded")
	}
}
