package secure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter counts the writes made on the connections it wraps.
type writeCounter struct{ n atomic.Int64 }

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.w.n.Add(1)
	return c.Conn.Write(b)
}

type countedListener struct {
	net.Listener
	w *writeCounter
}

func (l *countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{c, l.w}, nil
}

// TestLargeWritesBatched sends 2 MiB each way under TLS in one write per
// side: each side's records go out in writes of up to batchBytes, not one
// a record, and every byte arrives as sent (through the read buffer of a
// bulk connection, too).
func TestLargeWritesBatched(t *testing.T) {
	dir := makeDir(t)
	ps := load(t, Files{Dir: dir}, "ps", 0)
	w := load(t, Files{Dir: dir}, "worker", 1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var psWrites, wWrites writeCounter
	lis := ps.Listener(&countedListener{raw, &psWrites}, t.Logf)
	defer lis.Close()

	const size = 2 << 20
	req, rep := make([]byte, size), make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range req {
		req[i], rep[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	served := make(chan error, 1)
	wg.Go(func() {
		c, err := lis.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			served <- err
			return
		}
		if !bytes.Equal(got, req) {
			served <- errors.New("the ps read other bytes than the worker wrote")
			return
		}
		before := psWrites.n.Load()
		_, err = c.(interface {
			WriteBuffers(net.Buffers) (int64, error)
		}).WriteBuffers(net.Buffers{rep[:10], rep[10:]})
		if n := psWrites.n.Load() - before; err == nil && n > size/batchBytes+2 {
			err = fmt.Errorf("the ps wrote %d MiB in %d writes, want at most %d", size>>20, n, size/batchBytes+2)
		}
		served <- err
	})

	dial := w.Dialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{c, &wWrites}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dial(ctx, raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	before := wWrites.n.Load()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	if n := wWrites.n.Load() - before; n > size/batchBytes+2 {
		t.Errorf("the worker wrote %d MiB in %d writes, want at most %d", size>>20, n, size/batchBytes+2)
	}
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, rep) {
		t.Error("the worker read other bytes than the ps wrote")
	}
	if err := <-served; err != nil {
		t.Error(err)
	}
}

// failingConn fails every write after the first ok ones.
type failingConn struct {
	net.Conn
	ok     int
	writes int
}

var errBroken = errors.New("broken pipe")

func (c *failingConn) Write(b []byte) (int, error) {
	c.writes++
	if c.writes > c.ok {
		return 0, errBroken
	}
	return len(b), nil
}

// TestRecordConnWriteErrorSticks: once a gathered write fails, no later
// record goes out (a gap in the record stream would only be found by the
// peer).
func TestRecordConnWriteErrorSticks(t *testing.T) {
	fc := &failingConn{ok: 0}
	r := &recordConn{Conn: fc}
	r.begin()
	if _, err := r.Write(make([]byte, 100)); err != nil {
		t.Fatalf("a gathered write failed at once: %v", err)
	}
	if err := r.end(); !errors.Is(err, errBroken) {
		t.Fatalf("end: %v, want the write's error", err)
	}
	if _, err := r.Write([]byte("x")); !errors.Is(err, errBroken) {
		t.Errorf("a write after a failed one: %v, want the first error", err)
	}
	if fc.writes != 1 {
		t.Errorf("%d writes reached the connection after it failed, want none", fc.writes-1)
	}
}

// oneRead returns all its bytes and io.EOF in one read.
type oneRead struct {
	net.Conn
	b []byte
}

func (c *oneRead) Read(p []byte) (int, error) {
	n := copy(p, c.b)
	c.b = c.b[n:]
	return n, io.EOF
}

// TestRecordConnBufferedRead reads a bulk connection in small pieces: every
// byte comes, in order, and an error read with them only after them.
func TestRecordConnBufferedRead(t *testing.T) {
	want := make([]byte, 100_000)
	for i := range want {
		want[i] = byte(i * 7)
	}
	r := &recordConn{Conn: &oneRead{b: want}, read: bulkRead}
	var got []byte
	p := make([]byte, 17_000)
	for {
		n, err := r.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			if err != io.EOF {
				t.Fatalf("read: %v", err)
			}
			break
		}
		if n == 0 {
			t.Fatal("a read returned nothing and no error")
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("read %d bytes, not the %d sent in order", len(got), len(want))
	}
}
