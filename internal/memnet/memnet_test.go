package memnet

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestBytesFlowBothWaysAndCloseIsSeen(t *testing.T) {
	n := New()
	l, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := n.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := s.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("server read after the client closed: %v, want EOF", err)
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("a read of a closed end succeeded")
	}
}

func TestDialFaults(t *testing.T) {
	n := New()
	if _, err := n.Dial(context.Background(), "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with no listener: %v, want connection refused", err)
	}
	l, err := n.Listen("127.0.0.1:7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Listen("127.0.0.1:7"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen: %v, want address in use", err)
	}
	n.Refuse("127.0.0.1:7")
	if _, err := n.Dial(context.Background(), "127.0.0.1:7"); !ErrRefused(err) {
		t.Fatalf("refused address: %v", err)
	}
	n.Heal("127.0.0.1:7")
	n.Partition("127.0.0.1:7")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := n.Dial(ctx, "127.0.0.1:7"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("partitioned address: %v, want the dial to hang until its context ends", err)
	}
	n.Heal("127.0.0.1:7")
	if _, err := n.Dial(context.Background(), "127.0.0.1:7"); err != nil {
		t.Fatalf("healed: %v", err)
	}
	l.Close()
	if _, err := n.Dial(context.Background(), "127.0.0.1:7"); !ErrRefused(err) {
		t.Fatalf("after the listener closed: %v", err)
	}
}

// A partition loses bytes without a reset: the reader waits until its
// deadline, as on a real network whose packets are dropped.
func TestPartitionLosesBytesWithoutAReset(t *testing.T) {
	n := New()
	l, _ := n.Listen("")
	defer l.Close()
	c, _ := n.Dial(context.Background(), l.Addr().String())
	s, _ := l.Accept()
	n.Partition(l.Addr().String())
	if k, err := c.Write([]byte("lost")); err != nil || k != 4 {
		t.Fatalf("write into a partition: %d, %v (want taken)", k, err)
	}
	_ = s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 4)
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read across a partition: %v, want the deadline", err)
	}
}

// Killing a listener is a process's death: its connections are reset.
func TestListenerKillResetsItsConnections(t *testing.T) {
	n := New()
	l, _ := n.Listen("")
	c, _ := n.Dial(context.Background(), l.Addr().String())
	if _, err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	l.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after the listener's death: %v, want a reset", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read was not woken by the listener's death within 10s")
	}
}
