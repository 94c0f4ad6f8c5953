package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards TCP connections to target until cut: then it closes
// every connection it carries and every new one at once, until healed. It
// stands for the network between one ps and the others.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { io.Copy(dst, src); dst.Close(); src.Close(); done <- struct{}{} }
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *cutProxy) setCut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = on
	if on {
		for c := range p.conns {
			c.Close()
		}
	}
}

// A primary cut off from the other ps for 3 s, then healed (sync
// training, fixed seed; the replication traffic between ps 0 and the
// others goes through proxies in this test, the workers still reach every
// ps): ps 0 loses its lease and stops acknowledging, ps 1 takes over its
// shard, and once healed ps 0 learns it was removed and steps down (exits
// 1). The final checkpoint is byte for byte the undisturbed job's: no
// update lost, none applied twice. Not with -short (two jobs).
func TestReplicasPartitionedPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("two synchronous jobs: not with -short")
	}
	dir := t.TempDir()
	train := []string{"--model=linreg", "--replicas=2", "--failover_timeout=500ms", "--steps_to_validate=100",
		"--sync_replicas", "--train_steps=1500", "--seed=3"}
	calm := filepath.Join(dir, "calm")
	replicaJob(t, -1, "--sync_replicas", "--train_steps=1500", "--seed=3", "--checkpoint_dir="+calm)

	hosts := freeHosts(t, 5+6)
	ps, workers, repl := hosts[:3], hosts[3:5], hosts[5:]
	// repl is, per ps, its replication address then its copy's. ps 0
	// reaches the others' replication through proxies, and they reach its.
	toOthers := []*cutProxy{newCutProxy(t, repl[2]), newCutProxy(t, repl[4])}
	toZero := newCutProxy(t, repl[0])
	mine := slicesWith(repl, map[int]string{2: toOthers[0].addr(), 4: toOthers[1].addr()})
	theirs := slicesWith(repl, map[int]string{0: toZero.addr()})
	ck := filepath.Join(dir, "cut")
	var procs []*proc
	for i := range 3 {
		rh := theirs
		if i == 0 {
			rh = mine
		}
		procs = append(procs, start(t, "ps"+strconv.Itoa(i), nil, append(append(clusterArgs(ps, workers, "ps", i), train...),
			"--checkpoint_dir="+ck, "--replica_hosts="+strings.Join(rh, ","))...))
	}
	var ws []*proc
	for i := range 2 {
		ws = append(ws, start(t, "worker"+strconv.Itoa(i), nil, append(append(clusterArgs(ps, workers, "worker", i), train...),
			"--checkpoint_dir="+ck, "--replica_hosts="+strings.Join(theirs, ","))...))
	}
	ws[0].waitFor(t, "step: ", time.Minute)
	for _, p := range append(toOthers, toZero) {
		p.setCut(true)
	}
	procs[1].waitFor(t, "ps 1 took over shard 0", time.Minute)
	time.Sleep(3 * time.Second)
	for _, p := range append(toOthers, toZero) {
		p.setCut(false)
	}
	for i, w := range ws {
		if code := w.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("worker %d: exit %d, want 0\n%s", i, code, w.output())
		}
	}
	if code := procs[0].wait(t, time.Minute); code != 1 {
		t.Errorf("ps 0 (cut off, then healed): exit %d, want 1 (removed)\n%s", code, procs[0].output())
	}
	for _, want := range []string{"lease lapsed (no majority heard): not acknowledging", "removed from the cluster by a majority: stops serving"} {
		if !strings.Contains(procs[0].output(), want) {
			t.Errorf("ps 0 did not log %q:\n%s", want, procs[0].output())
		}
	}
	for i := 1; i < 3; i++ {
		if code := procs[i].wait(t, time.Minute); code != 0 {
			t.Errorf("ps %d: exit %d, want 0\n%s", i, code, procs[i].output())
		}
	}
	for i := range 3 {
		name := "shard-" + strconv.Itoa(i) + "-of-3.safetensors"
		a, err := os.ReadFile(filepath.Join(calm, "ckpt-1500", name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(ck, "ckpt-1500", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the undisturbed job and the one with ps 0 cut off", name)
		}
	}
}

// slicesWith is a copy of xs with the given elements replaced.
func slicesWith(xs []string, with map[int]string) []string {
	out := append([]string(nil), xs...)
	for i, x := range with {
		out[i] = x
	}
	return out
}
