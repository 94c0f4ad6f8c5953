package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/server"
)

// Issue 28, item 4: under TLS any certificate of the CA could push as any
// worker, Init, Restore and Checkpoint. Each task now acts only as itself
// and only the chief initialises, on gRPC and on the data path alike.
func TestRolesBoundToCertificates(t *testing.T) {
	dir := t.TempDir()
	if _, err := secure.MakeCerts(secure.CertsConfig{PS: []string{"127.0.0.1"}, Workers: []string{"127.0.0.1", "127.0.0.1"}, Out: dir, Valid: time.Hour}); err != nil {
		t.Fatal(err)
	}
	load := func(job string, i int) *secure.Policy {
		p, err := secure.Load(secure.Files{Dir: dir}, job, i, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	psPolicy := load("ps", 0)
	addr := serveFor(t, server.Config{NumWorkers: 2, Logf: t.Logf}, func(l net.Listener) net.Listener { return psPolicy.Listener(l, t.Logf) })
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	vars := []model.Variable{{Name: "w", Shape: []int{2}}}
	connect := func(cert string, i, as int) *client.Client {
		c, err := client.New([]string{addr.String()}, vars, client.Options{Worker: as, Dial: load(cert, i).Dialer(nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	initOpts := client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 1}, NumWorkers: 2}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "certificate is") {
			t.Errorf("%s: %v, want a refusal naming the certificate", what, err)
		}
	}
	// Worker 1's certificate claiming to be the chief.
	impostor := connect("worker", 1, 0)
	_, err := impostor.Init(ctx, model.Params{"w": {1000, 1000}}, initOpts)
	refused("Init with worker 1's certificate", err)
	// The chief initialises.
	chief := connect("worker", 0, 0)
	if _, err := chief.Init(ctx, model.Params{"w": {1, 2}}, initOpts); err != nil {
		t.Fatal(err)
	}
	_, _, err = impostor.Push(ctx, 0, model.Params{"w": {100, 100}})
	refused("Push as worker 0 with worker 1's certificate", err)
	_, err = impostor.ChangeRate(ctx, optim.RateChange{From: 0, LearningRate: 1000})
	refused("ChangeRate with worker 1's certificate", err)
	psAsWorker := connect("ps", 0, 1)
	_, _, err = psAsWorker.Push(ctx, 0, model.Params{"w": {100, 100}})
	refused("Push as worker 1 with ps 0's certificate", err)
	refused("Done as worker 1 with ps 0's certificate", psAsWorker.Done(ctx))
	// Worker 1 as itself.
	w1 := connect("worker", 1, 1)
	if _, _, err := w1.Push(ctx, 0, model.Params{"w": {1, 1}}); err != nil {
		t.Fatalf("worker 1 pushing as itself: %v", err)
	}
	got := model.NewParams(vars)
	if _, err := chief.Pull(ctx, 1, got); err != nil {
		t.Fatal(err)
	}
	if got["w"][0] != 0 || got["w"][1] != 1 {
		t.Errorf("w = %v, want [0 1]: only worker 1's own push applied", got["w"])
	}
}
