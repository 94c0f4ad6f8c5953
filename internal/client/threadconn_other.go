//go:build !linux

package client

import "net"

// newThreadConn is nc itself where threadConn is not written (the reads
// and writes wait as a net.Conn's do).
func newThreadConn(nc net.Conn) net.Conn { return nc }
