package testutil

import (
	"net"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback host:port where connections are refused
// for as long as the test runs: a socket bound there that never listens.
// A port found free by listening and closing could be taken, between the
// close and the test's dial, by anything on the machine binding port 0 or
// connecting out; this one stays bound until the test's cleanup.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("testutil: a socket for a refused address: %v", err)
	}
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("testutil: binding a socket to 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("testutil: the bound socket's address: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("testutil: the bound socket's address is %T, want IPv4", sa)
	}
	return (&net.TCPAddr{IP: net.IP(in4.Addr[:]), Port: in4.Port}).String()
}
