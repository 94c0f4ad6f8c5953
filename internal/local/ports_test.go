package local

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsAvoidTheEphemeralRange checks what keeps a cluster's ports
// from being taken by its own processes: they lie outside the range the
// kernel picks port 0 from, and successive calls never repeat a port (a
// cluster's replica listeners are chosen by a second call).
func TestFreePortsAvoidTheEphemeralRange(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	seen := map[int]bool{}
	for range 5 {
		ports, err := FreePorts(8)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 8 {
			t.Fatalf("got %d ports, want 8", len(ports))
		}
		for _, p := range ports {
			if hi-lo >= 1032 && (p < lo || p >= hi) {
				t.Errorf("port %d outside [%d, %d)", p, lo, hi)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	// Every port is free: binding each succeeds.
	for p := range seen {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		l.Close()
	}
	// A port-0 listener (what a child's metrics endpoint uses) never lands
	// on one of them.
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if seen[p] {
			t.Fatalf("the kernel gave port %d, one FreePorts handed out", p)
		}
	}
}
