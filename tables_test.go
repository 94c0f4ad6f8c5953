package paramserv_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/paramserv/paramserv"
)

// PullTables reads the rows of several tables in one call, the same values
// PullRows reads table by table: the rows pushed, and the initial value
// of keys never pushed. Two ps, so each call spans both.
func TestPullTables(t *testing.T) {
	ctx := context.Background()
	var ps []string
	var lis []net.Listener
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, ps = append(lis, l), append(ps, fmt.Sprintf("%q", l.Addr()))
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%s,%s],"worker":["127.0.0.1:1"]}`, ps[0], ps[1])
	done := make(chan error, 2)
	for i, l := range lis {
		go func() {
			done <- paramserv.ServePS(ctx, paramserv.PSConfig{
				TFConfig: fmt.Sprintf(`{%s,"task":{"type":"ps","index":%d}}`, cluster, i),
				Listen:   func(string) (net.Listener, error) { return l, nil },
			})
		}()
	}
	tables := []paramserv.Table{{Name: "a", Dim: 2}, {Name: "b", Dim: 3, Init: "normal", InitStddev: 1, Seed: 5}}
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:  `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Variables: []paramserv.Variable{{Name: "v", Shape: []int{1}}},
		Tables:    tables,
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1},
	}, paramserv.Params{"v": {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	keys := []uint64{3, 1 << 40, 17, 99, 12345}
	push := []paramserv.Rows{
		{Table: "a", Keys: keys[:3], Values: []float32{1, 2, 3, 4, 5, 6}},
		{Table: "b", Keys: keys[1:2], Values: []float32{-1, -2, -3}},
	}
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.PushPullRows(ctx, grads, params, push); err != nil {
		t.Fatal(err)
	}
	got := []paramserv.Rows{
		{Table: "a", Keys: keys, Values: make([]float32, len(keys)*2)},
		{Table: "b", Keys: keys, Values: make([]float32, len(keys)*3)},
		{Table: "a", Keys: nil}, // nothing to read: skipped
	}
	if err := w.PullTables(ctx, got); err != nil {
		t.Fatal(err)
	}
	if want := []float32{-1, -2, -3, -4, -5, -6, 0, 0, 0, 0}; !slices.Equal(got[0].Values, want) {
		t.Errorf("table a: %v, want %v", got[0].Values, want)
	}
	for i, r := range got[:2] {
		one := make([]float32, len(r.Values))
		if err := w.PullRows(ctx, r.Table, r.Keys, one); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, r.Values) {
			t.Errorf("table %s: PullTables read %v, PullRows %v", tables[i].Name, r.Values, one)
		}
	}
	if err := w.Done(ctx); err != nil {
		t.Fatal(err)
	}
	for range lis {
		if err := <-done; err != nil {
			t.Errorf("ps: %v", err)
		}
	}
}
