package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
)

// TestMaxTableKeys: with a cap, a push that would add rows past it is
// refused whole with an Invalid error naming the table and the cap, and
// changes nothing; pushes to rows held, and pulls of keys past the cap,
// go on without adding a row (issue 28: 20M new keys grew a ps by 2.3 GB).
func TestMaxTableKeys(t *testing.T) {
	sh := New(Config{NumWorkers: 1, MaxTableKeys: 4})
	l := Layout{Tables: []TableSpec{{Name: "emb", Dim: 2}}, Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1}
	if _, err := sh.Init(l, nil); err != nil {
		t.Fatal(err)
	}
	push := func(keys ...uint64) error {
		p := &Push{Worker: 0, Step: 0, Sparse: []SparseGrad{{Table: []byte("emb"), Keys: keys, Values: make([]float32, 2*len(keys)), Bad: -1}}}
		if err := sh.Check(p); err != nil {
			return err
		}
		_, err := sh.Apply(p, time.Time{}, nil)
		return err
	}
	if err := push(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	err := push(3, 4, 5)
	if !errors.Is(err, &Error{Kind: Invalid}) || !strings.Contains(err.Error(), `table "emb"`) || !strings.Contains(err.Error(), "cap of 4 keys") {
		t.Fatalf("push past the cap: %v, want Invalid naming table \"emb\" and the cap of 4", err)
	}
	if n := sh.st.tables["emb"].t.Len(); n != 3 {
		t.Fatalf("the refused push left %d rows, want 3", n)
	}
	if err := push(1, 4); err != nil {
		t.Fatalf("push up to the cap: %v", err)
	}
	dst := make([]float32, 2*3)
	if err := sh.PullRows([]byte("emb"), []uint64{7, 8, 9}, nil, false, dst); err != nil {
		t.Fatal(err)
	}
	if n := sh.st.tables["emb"].t.Len(); n != 4 {
		t.Fatalf("pulls past the cap made %d rows, want 4", n)
	}
}
