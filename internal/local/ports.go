package local

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
//
// The ports come from below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), so that a process binding port
// 0 (a child's metrics endpoint, an in-process test server, an outgoing
// connection) is never given one of them between the moment they are chosen
// and the moment the child binds them: the kernel hands out port 0 only from
// the ephemeral range. Each is checked by binding it, they are held open until
// all are chosen, and a port this process has handed out before is not
// handed out again, so the ports of one cluster (and of its replica listeners
// and metrics, chosen by later calls) are distinct. Another program could
// still bind one first; the child then fails with a clear "port in use"
// error. Where no such range can be found, the kernel chooses (port 0).
func FreePorts(n int) ([]int, error) {
	lo, hi := portsBelowEphemeral()
	if hi-lo < 4*n+1000 {
		return kernelPorts(n)
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	size := hi - lo
	start := rand.IntN(size)
	for i := 0; i < size && len(ports) < n; i++ {
		p := lo + (start+i)%size
		if handedOut.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("local: found only %d of %d free ports in %d-%d", len(ports), n, lo, hi-1)
	}
	if handedOut.ports == nil || len(handedOut.ports) > size/2 {
		handedOut.ports = make(map[int]bool) // long ago handed out: bound or given up by now
	}
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	return ports, nil
}

// handedOut remembers the ports FreePorts has returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// portsBelowEphemeral returns [lo, hi): the ports from 10000 up to the start
// of the kernel's ephemeral range (Linux's default starts at 32768; without
// /proc, 32768 is assumed, below the 49152 of other systems).
func portsBelowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	return lo, hi
}

// kernelPorts lets the kernel choose n distinct free ports.
func kernelPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("local: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
