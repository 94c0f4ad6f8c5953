package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/testutil"
	"github.com/paramserv/paramserv/internal/wire"
)

// rawCodec sends a []byte as the message itself, uncopied: an attacker's
// message of any length and content.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

// vmHWM is the peak resident memory of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// Issue 28, item 5: six gRPC streams, each sending a 256 MiB message, make
// a ps hold next to nothing: each is refused from its 5-byte length prefix
// (ResourceExhausted, naming gRPC's limit of 1 MiB) before gRPC reads the
// rest, and a worker then trains against the same ps. Before, the ps read
// every message whole (its limit was 1 GiB) and its peak memory rose by
// about 1.5 GB.
func TestOversizedGRPCMessagesAreNotRead(t *testing.T) {
	hosts := freeHosts(t, 2)
	ps := start(t, "ps0", nil, clusterArgs(hosts[:1], hosts[1:], "ps", 0)...)
	ps.waitFor(t, "serving on", 30*time.Second)
	before := vmHWM(t, ps.cmd.Process.Pid)

	conn, err := grpc.NewClient(hosts[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<30), grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const streams, size = 6, 256 << 20
	body := make([]byte, size) // one buffer, sent by every stream
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var reply []byte
			errs[i] = conn.Invoke(ctx, "/paramserv.v1.ParamServer/Push", body, &reply)
		})
	}
	wg.Wait()
	after := vmHWM(t, ps.cmd.Process.Pid)
	t.Logf("ps peak memory (VmHWM): %d MiB before the streams, %d MiB after (%d streams of %d MiB)", before>>20, after>>20, streams, size>>20)
	for i, err := range errs {
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), fmt.Sprintf("larger than max (%d vs. %d)", size, wire.GRPCMaxMessage)) {
			t.Fatalf("stream %d of a %d-byte message: %v, want it refused by the ps's limit of %d", i, size, err, wire.GRPCMaxMessage)
		}
	}
	t.Logf("each stream: %v", errs[0])
	// One message read whole would pass this.
	if grew := after - before; grew > 64<<20 {
		t.Fatalf("the ps's peak memory grew by %d MiB for %d refused streams", grew>>20, streams)
	}

	w := start(t, "worker0", nil, append(clusterArgs(hosts[:1], hosts[1:], "worker", 0), "--train_steps=50")...)
	if code := w.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("a worker after the refused streams: exit %d\n%s", code, w.output())
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps exit %d", code)
	}
}

// Issue 28, item 5: a chief whose Init is larger than the ps reads in one
// gRPC message (wire.GRPCMaxMessage) initialises a real ps, its Init sent
// in pieces; so does a push and pull of every value by gRPC alone, and the
// values come back as the update rule made them.
func TestLargeInitInPieces(t *testing.T) {
	hosts := freeHosts(t, 2)
	ps := start(t, "ps0", nil, clusterArgs(hosts[:1], hosts[1:], "ps", 0)...)
	ps.waitFor(t, "serving on", 30*time.Second)
	const n = 3 << 20 // 12 MiB of values
	vars := []model.Variable{{Name: "w", Shape: []int{n}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(hosts[:1], vars, client.Options{GRPCOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	init, grad := model.NewParams(vars), model.NewParams(vars)
	for i := range init["w"] {
		init["w"][i], grad["w"][i] = float32(i%1000), 2
	}
	if _, err := c.Init(ctx, init, client.InitOptions{Optimizer: optim.Config{Name: "sgd", LearningRate: 0.5}, NumWorkers: 1}); err != nil {
		t.Fatalf("Init of %d MiB: %v", 4*n>>20, err)
	}
	if _, _, err := c.Push(ctx, 0, grad); err != nil {
		t.Fatalf("a push of %d MiB by gRPC: %v", 4*n>>20, err)
	}
	got := model.NewParams(vars)
	if _, err := c.Pull(ctx, 0, got); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 999, n - 1} {
		if want := float32(i%1000) - 1; got["w"][i] != want {
			t.Fatalf("w[%d] = %v after one push, want %v", i, got["w"][i], want)
		}
	}
	if err := c.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if code := ps.wait(t, time.Minute); code != 0 {
		t.Fatalf("ps exit %d", code)
	}
}

// Issue 28, item 5: the real chief of a model whose Init is 3 MB (mnist
// with 1000 hidden units: a 784 × 1000 layer), three times what the ps
// reads in one gRPC message, initialises its ps and the job ends well.
func TestChiefWithAModelOverTheMessageLimit(t *testing.T) {
	data := testutil.DataDir(t, "mnist")
	p := start(t, "local", nil, "local", "--ps=1", "--workers=1", "--model=mnist", "--data_dir="+filepath.Join(data, "mnist"),
		"--hidden_units=1000", "--train_steps=5")
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if out := p.output(); !strings.Contains(out, "chief initialised 4 variables on 1 ps") {
		t.Fatalf("no Init in the output:\n%s", out)
	}
}
