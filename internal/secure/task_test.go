package secure

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// A certificate paramserv certs makes names its task, and the connection
// says which task its peer proved, on both sides.
func TestPeerTask(t *testing.T) {
	dir := makeDir(t)
	ps := load(t, Files{Dir: dir}, "ps", 0)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := ps.Listener(raw, func(string, ...any) {})
	defer lis.Close()
	got := make(chan Task, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		_, _ = c.Read(b)
		task, _ := PeerTask(c)
		got <- task
		_, _ = c.Write(b)
	}()
	w := load(t, Files{Dir: dir}, "worker", 1)
	c, err := w.Dialer(nil)(context.Background(), raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if task, ok := PeerTask(c); !ok || task != (Task{"ps", 0}) {
		t.Errorf("the worker's dial: peer %v %v, want ps 0", task, ok)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if task := <-got; task != (Task{"worker", 1}) {
		t.Errorf("the ps's connection: peer %v, want worker 1", task)
	}
}

// A worker's certificate serving as a ps is refused by the task that
// dials it (issue 28: a worker's certificate served a real chief).
func TestWorkerCertCannotServe(t *testing.T) {
	dir := makeDir(t)
	fake := load(t, Files{Dir: dir}, "worker", 1)
	s := serveEcho(t, fake)
	w := load(t, Files{Dir: dir}, "worker", 0)
	c, err := w.Dialer(nil)(context.Background(), s.addr)
	if err == nil {
		c.Close()
		t.Fatal("a worker's certificate served as a ps")
	}
	if !errors.Is(err, ErrNotPS) || !strings.Contains(err.Error(), "worker 1") {
		t.Errorf("dial: %v, want ErrNotPS naming worker 1", err)
	}
}

// A task loading another task's certificate is told so before it starts.
func TestLoadOtherTasksCert(t *testing.T) {
	dir := makeDir(t)
	f := Files{Dir: dir, Cert: dir + "/" + CertFile("worker", 1), Key: dir + "/" + KeyFile("worker", 1)}
	if _, err := Load(f, "worker", 0, ""); err == nil || !strings.Contains(err.Error(), "worker 1's, not this task's (worker 0)") {
		t.Errorf("Load of worker 1's certificate as worker 0: %v", err)
	}
}

func TestTaskOf(t *testing.T) {
	dir := makeDir(t)
	p := load(t, Files{Dir: dir}, "worker", 1)
	leaf := p.client.Certificates[0].Leaf
	if leaf == nil {
		t.Skip("no parsed leaf")
	}
	if task, ok := TaskOf(leaf); !ok || task != (Task{"worker", 1}) {
		t.Errorf("TaskOf = %v %v, want worker 1", task, ok)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "paramserv://task/worker/1" {
		t.Errorf("URIs %v, want paramserv://task/worker/1", leaf.URIs)
	}
}
