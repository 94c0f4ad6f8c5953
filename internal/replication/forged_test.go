package replication

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/replica"
)

// TestForgedReformOverTCP is the attack of issue 28 (item 1): one
// message of about a hundred bytes to a ps's replication port, claiming a
// later epoch in ps 1's name, re-formed a healthy cluster and stalled the
// job. Over loopback TCP: the connection claiming ps 1 while ps 1 is
// connected is closed unread, and ps 0 serves on, re-forming nothing.
func TestForgedReformOverTCP(t *testing.T) {
	c := start(t, 3, 2, 500*time.Millisecond, true)
	pushUntil(t, c.hosts[0], 0, replica.ReqID{Client: 0, N: 1}, 1) // ps 1 (its backup) answered over its connection
	m := replica.Message{Type: replica.Heartbeat, From: 1, To: 0, Boot: 42, Epoch: 7<<8 | 1, Boots: []uint64{1, 42, 3}, Sent: time.Now()}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", c.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
	// ps 0 closes the connection: the read ends (bounded by a deadline).
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the forged connection was not closed: %v", err)
	}
	pushUntil(t, c.hosts[0], 0, replica.ReqID{Client: 0, N: 2}, 1)
	var logs []string
	for {
		select {
		case l := <-c.logs:
			logs = append(logs, l.line)
			continue
		default:
		}
		break
	}
	all := strings.Join(logs, "\n")
	if strings.Contains(all, "re-formed") {
		t.Errorf("a forged message re-formed the cluster:\n%s", all)
	}
	if !strings.Contains(all, "claims to be ps 1, which is connected already") {
		t.Errorf("no line about the forged connection:\n%s", all)
	}
	if got := c.sum(0, 0); got != 2 {
		t.Errorf("ps 0's copy of shard 0: %d, want 2", got)
	}
}

type provedConn struct {
	net.Conn
	job   string
	index int
}

func (c provedConn) PeerTask() (string, int, bool) { return c.job, c.index, true }

// Under TLS a connection counts as the ps its certificate proves, whatever
// its messages claim; a worker's certificate is no ps.
func TestIdentifyByCertificate(t *testing.T) {
	h := &Host{cfg: HostConfig{Config: replica.Config{ID: 0, N: 3}}}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	m := replica.Message{From: 1, To: 0}
	for _, tc := range []struct {
		job    string
		index  int
		sender int
		why    string
	}{
		{"ps", 2, 2, ""},
		{"ps", 1, 1, ""},
		{"worker", 1, -1, "proves worker 1, not another ps"},
		{"ps", 0, -1, "proves ps 0, not another ps"},
		{"ps", 3, -1, "proves ps 3, not another ps"},
	} {
		sender, reg, why := h.identify(provedConn{a, tc.job, tc.index}, m)
		if sender != tc.sender || reg || !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
			t.Errorf("%s %d claiming ps 1: sender %d, registered %v, %q; want %d, %q", tc.job, tc.index, sender, reg, why, tc.sender, tc.why)
		}
	}
	// Plain: the first connection claiming ps 1 holds it while open.
	if s, reg, why := h.identify(a, m); s != 1 || !reg || why != "" {
		t.Fatalf("first plain connection: %d %v %q", s, reg, why)
	}
	if s, _, why := h.identify(b, m); s != -1 || !strings.Contains(why, "connected already") {
		t.Errorf("second plain connection claiming ps 1: %d %q", s, why)
	}
	h.unregister(1, a)
	if s, _, why := h.identify(b, m); s != 1 || why != "" {
		t.Errorf("after the first closed: %d %q", s, why)
	}
}
