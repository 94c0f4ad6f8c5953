package replication

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/wire"
)

// The copies of each shard and where they are served: ps s at its ps
// address, ps s+1 … at the copy addresses --replica_hosts gives them.
func TestReplicationCopies(t *testing.T) {
	ps := []string{"p0", "p1", "p2"}
	r := Options{Replicas: 2, FailoverTimeout: 1, Hosts: []string{"r0", "c0", "r1", "c1", "r2", "c2"}}
	if err := r.Check(3); err != nil {
		t.Fatal(err)
	}
	for s, want := range [][]string{{"p0", "c1"}, {"p1", "c2"}, {"p2", "c0"}} {
		if got := r.copies(s, ps); !slices.Equal(got, want) {
			t.Errorf("copies of shard %d: %v, want %v", s, got, want)
		}
	}
	r3 := Options{Replicas: 3, FailoverTimeout: 1, Hosts: []string{"r0", "a0", "b0", "r1", "a1", "b1", "r2", "a2", "b2"}}
	// ps 1 holds shard 0 one after its primary (a1); ps 2 holds it two after (b2).
	if got, want := r3.copies(0, ps), []string{"p0", "a1", "b2"}; !slices.Equal(got, want) {
		t.Errorf("3 copies of shard 0: %v, want %v", got, want)
	}
	for _, bad := range []Options{
		{Replicas: 4, FailoverTimeout: 1, Hosts: make([]string, 12)},
		{Replicas: 2, FailoverTimeout: 0, Hosts: make([]string, 6)},
		{Replicas: 2, FailoverTimeout: 1, Hosts: make([]string, 5)},
	} {
		if bad.Check(3) == nil {
			t.Errorf("%+v accepted for 3 ps", bad)
		}
	}
	if (Options{Replicas: 1}).Enabled() {
		t.Error("--replicas=1 enabled replication")
	}
}

// Every copy of a shard gets the same incarnations, in the same order;
// another shard gets others. After a re-formation every copy counts
// afresh from the epoch, however many restores it made before.
func TestReplicationIncarnations(t *testing.T) {
	ps := []string{"a:1", "b:2"}
	a, b, other := newIncarnations(ps, 0), newIncarnations(ps, 0), newIncarnations(ps, 1)
	seen := map[uint64]bool{}
	for range 3 {
		x, y, z := a.next(), b.next(), other.next()
		if x != y || x == z || x == 0 {
			t.Fatalf("incarnations %d, %d (same shard), %d (other shard)", x, y, z)
		}
		seen[x] = true
	}
	// A copy installed at a rejoin carries the incarnation of the copy it
	// came from; the next restore then gives both the same new id.
	c := newIncarnations(ps, 0)
	c.follow(a.next())
	b.next()
	if x, y := a.next(), c.next(); x != y || seen[x] {
		t.Fatalf("after a rejoin: incarnations %d and %d, want one new id", x, y)
	}
	c.follow(12345) // not of this counter's form: ignored
	if x, y := a.next(), c.next(); x != y {
		t.Fatalf("after following a foreign id: incarnations %d and %d, want one id", x, y)
	}
	a.next() // a restored once more than b before the re-formation
	a.newEpoch(1 << 8)
	b.newEpoch(1 << 8)
	if x, y := a.next(), b.next(); x != y || seen[x] {
		t.Fatalf("after a re-formation: incarnations %d and %d, want one new id", x, y)
	}
}

// Under --replicas the copies serve the binary data path on their
// addresses (next to gRPC), and a worker's pushes and pulls through it are
// applied once each.
func TestReplicatedCopiesServeTheDataPath(t *testing.T) {
	spec, dial := startReplicated(t, 3, 2)
	ctx := withDeadline(t, time.Minute)
	for _, a := range spec.PS {
		conn, err := dial(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		var hb [wire.HelloLen]byte
		if _, err := conn.Write(wire.Preface()); err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadFull(conn, hb[:])
		conn.Close()
		if err != nil {
			t.Fatalf("ps at %s: no answer to the data path's preface: %v", a, err)
		}
		if h, err := wire.ParseHello(hb[:]); err != nil || h.Status != wire.HelloOK {
			t.Fatalf("ps at %s: data path hello %+v, %v; want status OK", a, h, err)
		}
	}
	vars := []model.Variable{{Name: "w", Shape: []int{3000}}}
	c, err := client.New(spec.PS, vars, client.Options{Worker: 0, SplitBytes: 1, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	params, grads := model.NewParams(vars), model.NewParams(vars)
	for i := range grads["w"] {
		grads["w"][i] = 1
	}
	step, err := c.Init(ctx, params, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if step, _, err = c.PushPull(ctx, step, grads, 0, params); err != nil {
			t.Fatal(err)
		}
	}
	if step != 5 {
		t.Errorf("global step %d after 5 pushes", step)
	}
	for i, v := range params["w"] {
		if v != -5 {
			t.Fatalf("w[%d] = %v after 5 pushes of 1 (sgd, rate 1), want -5", i, v)
		}
	}
}

// A resend that itself waits (a copy holding the push and never
// acknowledging it) is cut at --recovery_timeout like the loop around it,
// and the last failover error goes to the usual recovery with a line
// naming the bound: nothing waits forever.
func TestResendAfterFailoverBoundsEachResend(t *testing.T) {
	logs := &logBuf{}
	cfg := WorkerConfig{RecoveryTimeout: 300 * time.Millisecond, WaitLogEvery: time.Hour, Logf: logs.logf("")}
	first := fmt.Errorf("ps 1: %w", client.ErrUnavailable)
	sends := 0
	done := make(chan error, 1)
	go func() {
		_, err := cfg.ResendAfterFailover(context.Background(), 7, first, func(ctx context.Context) (int64, error) {
			sends++
			<-ctx.Done() // held, never acknowledged
			return 0, ctx.Err()
		})
		done <- err
	}()
	select {
	case err := <-done:
		if err != first {
			t.Errorf("ResendAfterFailover returned %v, want the last failover error %v", err, first)
		}
	case <-time.After(time.Minute):
		t.Fatal("ResendAfterFailover still waits a minute after --recovery_timeout=300ms, on a resend that is never acknowledged")
	}
	if sends != 1 || logs.count("--recovery_timeout=300ms passed while step 7 was sent again") != 1 {
		t.Errorf("%d sends; log:\n%s", sends, logs)
	}
}
