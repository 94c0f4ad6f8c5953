package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/client"
	"github.com/paramserv/paramserv/internal/model"
	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/wire"
)

// dataPathSeeds are real request sequences of the data path, each sent on
// one connection: pushes, pulls and push+pulls of a dense variable and of
// sparse rows, keys sent inline, kept in a cache slot and named by it, and
// pulled as the push's; and requests the ps must refuse (NaN, unknown
// names, wrong sizes, a slot never filled).
func dataPathSeeds(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	var seq bytes.Buffer
	add := func(h wire.ReqHeader, build func(f *wire.Frame)) {
		var f wire.Frame
		f.Reset(wire.ReqHeaderLen)
		build(&f)
		bufs := f.Request(h)
		if _, err := bufs.WriteTo(&seq); err != nil {
			t.Fatal(err)
		}
	}
	end := func() {
		out = append(out, bytes.Clone(seq.Bytes()))
		seq.Reset()
	}
	keys := []uint64{5, 1 << 63, 9}
	// A dense push, a dense pull, a dense push+pull.
	add(wire.ReqHeader{Op: wire.OpPush, Step: 0}, func(f *wire.Frame) { f.Dense("w", []float32{1, 2, 3}) })
	add(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, func(f *wire.Frame) {})
	add(wire.ReqHeader{Op: wire.OpPushPull, PullDense: true, Worker: 1, Step: 1}, func(f *wire.Frame) { f.Dense("w", []float32{-1, 0, .5}) })
	end()
	// Rows: keys inline kept in slot 2; then named by slot 2; then a
	// push+pull whose pull is the push's keys; then a pull of inline keys
	// kept nowhere.
	add(wire.ReqHeader{Op: wire.OpPushPull, Step: 0}, func(f *wire.Frame) {
		f.SparsePush("emb", wire.KeysInline, 2, 3, keys, []float32{1, 2, 3, 4, 5, 6})
		f.SparsePull("emb", wire.KeysAsPush, 0, 3, nil)
	})
	add(wire.ReqHeader{Op: wire.OpPush, Step: 1}, func(f *wire.Frame) {
		f.Dense("w", []float32{1, 1, 1})
		f.SparsePush("emb", wire.KeysCached, 2, 3, nil, []float32{1, 1, 1, 1, 1, 1})
	})
	add(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, func(f *wire.Frame) {
		f.SparsePull("emb", wire.KeysCached, 2, 3, nil)
		f.SparsePull("emb", wire.KeysInline, wire.NoSlot, 2, []uint64{1, 2})
	})
	end()
	// Refused: a NaN, an unknown variable, a wrong size, an unknown table,
	// an empty cache slot; each alone on its connection (the first error
	// reply does not end it, a malformed frame does).
	nan := float32(math.NaN())
	for _, build := range []func(f *wire.Frame){
		func(f *wire.Frame) { f.Dense("w", []float32{1, nan, 3}) },
		func(f *wire.Frame) { f.Dense("nope", []float32{1}) },
		func(f *wire.Frame) { f.Dense("w", []float32{1, 2}) },
		func(f *wire.Frame) {
			f.SparsePush("nope", wire.KeysInline, wire.NoSlot, 1, []uint64{1}, []float32{1, 2})
		},
		func(f *wire.Frame) { f.SparsePush("emb", wire.KeysInline, wire.NoSlot, 1, []uint64{1}, []float32{1}) },
		func(f *wire.Frame) { f.SparsePush("emb", wire.KeysCached, 5, 1, nil, []float32{1, 2}) },
	} {
		add(wire.ReqHeader{Op: wire.OpPush}, build)
		add(wire.ReqHeader{Op: wire.OpPull, PullDense: true}, func(f *wire.Frame) {})
		end()
	}
	return out
}

// FuzzDataPathRequests sends arbitrary bytes after the preface on a data
// connection to a running ps (one variable, one table, asynchronous). Every
// request the ps decodes on the data path goes through here: pushes,
// pulls and push+pulls, dense and sparse, in every key mode, one after
// another on one connection so that cache slots carry over. The ps must
// never panic (the fuzzing process would die), must answer or close the
// connection once the input ends, and must keep serving: Status answers
// after every input. Every frame's MinStep is set to 0, so that no pull
// waits for a step that never comes.
func FuzzDataPathRequests(f *testing.F) {
	for _, s := range dataPathSeeds(f) {
		f.Add(s)
	}
	addrs := startPS(f, 1, 2)
	vars := []model.Variable{{Name: "w", Shape: []int{3}}}
	c, err := client.New(addrs, vars, client.Options{Tables: []model.Table{{Name: "emb", Dim: 2}}, GRPCOnly: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if _, err := c.WaitReady(ctx, false); err != nil {
		f.Fatal(err)
	}
	if _, err := c.Init(ctx, model.Params{"w": {1, 2, 3}}, client.InitOptions{Optimizer: optim.Config{Name: "adagrad", LearningRate: 0.1}, NumWorkers: 2}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		in = bytes.Clone(in)
		for at := 0; at+wire.ReqHeaderLen <= len(in); {
			h := in[at : at+wire.ReqHeaderLen]
			clear(h[24:32]) // MinStep
			body := binary.LittleEndian.Uint64(h[32:40])
			if body > uint64(len(in)) {
				break
			}
			at += wire.ReqHeaderLen + int(body)
		}
		nc, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(nc)
		if _, err := nc.Write(wire.Preface()); err != nil {
			t.Fatal(err)
		}
		var hello [wire.HelloLen]byte
		if _, err := io.ReadFull(br, hello[:]); err != nil {
			t.Fatalf("no hello from the ps: %v", err)
		}
		// Write and read at once: the ps answers while the input arrives.
		werr := make(chan error, 1)
		go func() {
			_, err := nc.Write(in)
			if err == nil {
				err = nc.(*net.TCPConn).CloseWrite()
			}
			werr <- err
		}()
		_, rerr := io.Copy(io.Discard, br)
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			t.Fatalf("input %x: the ps neither answered nor closed the connection within 30s", in)
		}
		nc.Close()
		<-werr // a write may fail once the ps has closed on a malformed frame
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := c.Status(sctx); err != nil {
			t.Fatalf("input %x: Status after it: %v", in, err)
		}
	})
}
