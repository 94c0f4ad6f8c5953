package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/paramserv/paramserv/internal/optim"
	"github.com/paramserv/paramserv/internal/procgroup"
	"github.com/paramserv/paramserv/internal/wire"
)

// The baseline protocol, over one TCP connection: the client first sends
// 24 bytes, the request size Q, the reply size A (each 1..MaxBytes) and the
// work W as little-endian uint64; then, for every repetition, it writes Q
// bytes and the server, once it has read all Q, writes A bytes. The
// connection ends when the client closes it.
//
// W is 0 (baselineMove: the bytes are only moved) or 1 (baselineApply:
// with Q of 4 bytes or more, the server reads the request as Q/4 float32
// gradients and applies them to Q/4 values of its own with the ps's sgd
// rule at learning rate 1, and when A equals Q it answers with those values:
// the update a ps must make, done the simplest way, whole after the read
// and before the write).
const baselineHeader = 24

const (
	baselineMove  = 0
	baselineApply = 1
)

// ServeBaseline answers baseline connections on lis, each on its own
// goroutine, until lis is closed; it then returns the Accept error. A
// malformed header closes that connection only.
func ServeBaseline(lis net.Listener) error {
	for {
		conn, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer conn.Close()
			_ = serveBaselineConn(conn)
		}()
	}
}

func serveBaselineConn(conn net.Conn) error {
	var hdr [baselineHeader]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return err
	}
	q, a, w := binary.LittleEndian.Uint64(hdr[:8]), binary.LittleEndian.Uint64(hdr[8:16]), binary.LittleEndian.Uint64(hdr[16:])
	if q < 1 || q > MaxBytes || a < 1 || a > MaxBytes || w > baselineApply {
		return fmt.Errorf("bench: baseline header asks for %d request and %d reply bytes and work %d, want 1..%d bytes and work 0 or 1", q, a, w, MaxBytes)
	}
	// Every byte is written once, as a ps's values are: memory that was
	// never written reads as the kernel's one shared zero page, which stays
	// in cache and makes the copy into the socket unfairly cheap. Float32s,
	// so that the request can be read as gradients.
	mem := make([]float32, (max(q, a)+3)/4)
	buf := wire.Float32Bytes(mem)[:max(q, a)]
	for i := range buf {
		buf[i] = byte(i)
	}
	var rule optim.Rule
	var vals []float32
	if w == baselineApply && q >= 4 {
		rule, _ = optim.New(optim.Config{Name: "sgd", LearningRate: 1})
		vals = make([]float32, q/4)
		for i := range vals {
			vals[i] = float32(i % 7)
		}
	}
	reply := buf[:a]
	if vals != nil && a == q {
		reply = wire.Float32Bytes(vals)
	}
	for {
		if _, err := io.ReadFull(conn, buf[:q]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if vals != nil {
			rule.Update(vals, mem[:len(vals)], nil, 1)
		}
		if _, err := conn.Write(reply); err != nil {
			return err
		}
	}
}

// BaselineConn is the client end of one baseline exchange shape. It is
// used by one goroutine at a time.
type BaselineConn struct {
	conn     net.Conn
	req, rep []byte // reused every round trip
}

// DialBaseline connects to a baseline server at addr for round trips of
// request bytes out and reply bytes back. With apply the server also
// applies each request to values of its own as sgd does, and answers a
// request as long as the reply with those values; the request then carries
// float32 gradients of 1, as the ps's operations do.
func DialBaseline(ctx context.Context, addr string, request, reply int64, apply bool) (*BaselineConn, error) {
	if request < 1 || request > MaxBytes || reply < 1 || reply > MaxBytes {
		return nil, fmt.Errorf("bench: baseline round trip of %d bytes out and %d back: each must be 1..%d", request, reply, MaxBytes)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline server at %s: %w", addr, err)
	}
	var hdr [baselineHeader]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(request))
	binary.LittleEndian.PutUint64(hdr[8:16], uint64(reply))
	if apply {
		binary.LittleEndian.PutUint64(hdr[16:], baselineApply)
	}
	if _, err := conn.Write(hdr[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: baseline server at %s: %w", addr, err)
	}
	b := &BaselineConn{conn: conn, req: make([]byte, request), rep: make([]byte, reply)}
	for i := range b.req {
		b.req[i] = byte(i)
		if apply {
			b.req[i] = one32[i%4]
		}
	}
	return b, nil
}

// RoundTrip writes the request bytes and reads the whole reply.
func (b *BaselineConn) RoundTrip() error {
	if _, err := b.conn.Write(b.req); err != nil {
		return fmt.Errorf("bench: baseline write: %w", err)
	}
	if _, err := io.ReadFull(b.conn, b.rep); err != nil {
		return fmt.Errorf("bench: baseline read: %w", err)
	}
	return nil
}

// Reply is the last reply read.
func (b *BaselineConn) Reply() []byte { return b.rep }

// Close closes the connection.
func (b *BaselineConn) Close() error { return b.conn.Close() }

// one32 is float32(1) in little-endian bytes.
var one32 = [4]byte{0, 0, 0x80, 0x3f}

// MeasureBaseline runs warmup and then reps timed round trips of request
// bytes out and reply bytes back against the server at addr (applied, with
// apply, as DialBaseline says), and returns the timed durations.
func MeasureBaseline(ctx context.Context, addr string, request, reply int64, apply bool, warmup, reps int) ([]time.Duration, error) {
	b, err := DialBaseline(ctx, addr, request, reply, apply)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = b.conn.SetDeadline(dl)
	}
	ds := make([]time.Duration, 0, reps)
	for i := range warmup + reps {
		t0 := time.Now()
		if err := b.RoundTrip(); err != nil {
			return nil, err
		}
		if i >= warmup {
			ds = append(ds, time.Since(t0))
		}
	}
	return ds, nil
}

// BaselineProcess is a baseline server running as a child process of this
// binary (`paramserv bench --baseline_server`), so that, like a ps, it
// runs in an address space and scheduler of its own.
type BaselineProcess struct {
	Addr string
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// StartBaselineProcess starts exe with args (which must make it call
// RunBaselineServer) and reads the address it prints.
func StartBaselineProcess(ctx context.Context, exe string, args ...string) (*BaselineProcess, error) {
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = procgroup.Attr()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting the baseline server %s: %w", exe, err)
	}
	p := &BaselineProcess{cmd: cmd, in: in}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case p.Addr = <-line:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	if _, _, err := net.SplitHostPort(p.Addr); err != nil {
		p.Close()
		return nil, fmt.Errorf("bench: the baseline server %s did not print its address within 30s (got %q)", exe, p.Addr)
	}
	return p, nil
}

// PID is the baseline server's process id.
func (p *BaselineProcess) PID() int { return p.cmd.Process.Pid }

// Close stops the baseline server: it exits when its standard input ends.
func (p *BaselineProcess) Close() error {
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = procgroup.Signal(p.cmd.Process, syscall.SIGKILL)
		return fmt.Errorf("bench: the baseline server (pid %d) did not exit within 5s of its input closing; killed", p.cmd.Process.Pid)
	}
}

// RunBaselineServer is the body of the baseline child process: it listens
// on a free loopback port, writes the address and a newline to out, and
// serves until stdin ends.
func RunBaselineServer(stdin io.Reader, out io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: baseline server: %w", err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		lis.Close()
	}()
	fmt.Fprintln(out, lis.Addr().String())
	err = ServeBaseline(lis)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
