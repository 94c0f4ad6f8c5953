package main

import (
	le "encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/vfs"
)

// rewriteShard rewrites shard 0 of the checkpoint at step under dir with
// edit applied to its file's tensors, and its manifest to match, as a
// forger with write access would: the checksums hold.
func rewriteShard(t *testing.T, dir string, step int64, edit func(*checkpoint.Shard)) {
	t.Helper()
	m, err := checkpoint.Load(vfs.OS, dir, step)
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.ReadShardFile(vfs.OS, dir, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	edit(&s)
	if err := os.Remove(filepath.Join(dir, checkpoint.CheckpointName(step), checkpoint.ManifestName)); err != nil {
		t.Fatal(err)
	}
	info, err := checkpoint.WriteShard(vfs.OS, dir, step, 0, len(m.Shards), s)
	if err != nil {
		t.Fatal(err)
	}
	m.Shards[0] = info
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
}

// A delta checkpoint whose parent holds a NaN, in a row the delta
// replaces, is no model: eval of it exits non-zero naming the NaN, eval of
// the latest takes the chain's full base, and ckpt ls says the chain is
// damaged. Before, only the newest file's values were checked: the
// parent's NaN passed, and eval of ckpt-40 exited 0.
func TestEvalDeltaWithNaNParent(t *testing.T) {
	data := testutil.DataDir(t, "a9a/a9a")
	dir := filepath.Join(t.TempDir(), "ckpt")
	model := []string{"--model=sparse_lr", "--data_dir=" + data, "--train_data=a9a/a9a", "--num_features=123", "--checkpoint_dir=" + dir}
	p := start(t, "job", nil, append([]string{"local", "--ps=1", "--workers=1", "--train_steps=40", "--save_steps=20", "--incremental_checkpoints", "--full_checkpoint_every=3"}, model...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.output())
	}
	m40, err := checkpoint.Load(vfs.OS, dir, 40)
	if err != nil || !m40.IsDelta() || m40.Parent != 20 {
		t.Fatalf("ckpt-40: delta %v of %d, %v; want a delta of ckpt-20", m40.IsDelta(), m40.Parent, err)
	}
	last, err := checkpoint.ReadShardFile(vfs.OS, dir, m40, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A NaN in ckpt-20 at a key ckpt-40 holds again: the state ckpt-40
	// reads is finite.
	again := last.ByName()[checkpoint.KeysName("weights")]
	rewriteShard(t, dir, 20, func(s *checkpoint.Shard) {
		byName := s.ByName()
		keys, vals := byName[checkpoint.KeysName("weights")], byName[checkpoint.ValuesName("weights")]
		for i := 0; i < len(keys.Data)/8; i++ {
			if k := keys.Data[8*i : 8*i+8]; slices.ContainsFunc(chunks8(again.Data), func(b []byte) bool { return string(b) == string(k) }) {
				le.LittleEndian.PutUint32(vals.Data[4*i:], math.Float32bits(float32(math.NaN())))
				return
			}
		}
		t.Fatal("no key of ckpt-20 is in ckpt-40")
	})
	args := append([]string{"eval"}, model[:len(model)-1]...)
	args = append(args, "--checkpoint_dir="+dir)
	code, out, errOut := runCLI(t, nil, append(args, "--step=40")...)
	if code == 0 || !strings.Contains(errOut, "ckpt-40 is a delta of ckpt-20, which is damaged") || !strings.Contains(errOut, "is NaN") {
		t.Errorf("eval --step=40: exit %d, want non-zero naming the parent's NaN:\n%s%s", code, out, errOut)
	}
	// The latest valid checkpoint is the chain's full base.
	code, out, errOut = runCLI(t, nil, args...)
	if code != 0 || !strings.Contains(out+errOut, "eval of "+filepath.Join(dir, "ckpt-0")+":") {
		t.Errorf("eval of the latest: exit %d, want ckpt-0 evaluated:\n%s%s", code, out, errOut)
	}
	_, out, _ = runCLI(t, nil, "ckpt", "ls", dir)
	for _, line := range strings.Split(out, "\n") {
		if (strings.HasPrefix(line, "ckpt-40 ") || strings.HasPrefix(line, "ckpt-20 ")) && !strings.Contains(line, "NaN") {
			t.Errorf("ckpt ls: %q, want damaged naming the NaN:\n%s", line, out)
		}
	}
}

// chunks8 cuts b into 8-byte pieces.
func chunks8(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 8 {
		out, b = append(out, b[:8]), b[8:]
	}
	return out
}

// paramserv status dials a ps address with an IPv6 zone as workers do:
// a ps on [::1] answers status at [::1%lo]. Before, gRPC's target parse
// refused it ("invalid URL escape "%lo"") and status exited 1.
func TestStatusIPv6Zone(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ps := start(t, "ps0", nil, "train", "--job_name=ps", "--task_index=0", fmt.Sprintf("--ps_hosts=[::1]:%d", port), "--worker_hosts=127.0.0.1:1")
	ps.waitFor(t, "serving on", time.Minute)
	zoned := fmt.Sprintf("[::1%%lo]:%d", port)
	code, out, errOut := runCLI(t, nil, "status", "--ps_hosts="+zoned, "--timeout=30s")
	if code != 0 || !strings.Contains(out, "ps 0 at "+zoned+": not initialised") {
		t.Fatalf("status of %s: exit %d, want the ps's answer:\n%s%s", zoned, code, out, errOut)
	}
}

// A worker trains against a ps it names with an IPv6 zone, [::1%lo], over
// gRPC and the data path, and the ps ends when it is done. Before, the
// worker exited 1 on gRPC's target parse.
func TestTrainIPv6Zone(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ps := start(t, "ps0", nil, "train", "--job_name=ps", "--task_index=0", fmt.Sprintf("--ps_hosts=[::1]:%d", port), "--worker_hosts=127.0.0.1:1")
	ps.waitFor(t, "serving on", time.Minute)
	w := start(t, "worker0", nil, "train", "--job_name=worker", "--task_index=0", fmt.Sprintf("--ps_hosts=[::1%%lo]:%d", port), "--worker_hosts=127.0.0.1:1", "--model=linreg", "--train_steps=20")
	if code := w.wait(t, 2*time.Minute); code != 0 || !strings.Contains(w.output(), "finished at global step 20") {
		t.Fatalf("worker: exit %d\n%s", code, w.output())
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps: exit %d\n%s", code, ps.output())
	}
}
