package secure

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// bulkServer answers every request of size bytes with a reply of size
// bytes, as a ps answers a dense push+pull: the request read through a
// bufio.Reader into a buffer of its own, the reply written as buffers.
func bulkServer(b *testing.B, p *Policy, size int) string {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lis := p.Listener(raw, b.Logf)
	b.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReaderSize(c, 64<<10)
				req, rep := make([]byte, size), make([]byte, size)
				for {
					if _, err := io.ReadFull(br, req); err != nil {
						return
					}
					if _, err := writeBuffersTo(c, net.Buffers{rep[:16], rep[16:]}); err != nil {
						return
					}
				}
			}()
		}
	}()
	return raw.Addr().String()
}

func writeBuffersTo(c net.Conn, bufs net.Buffers) (int64, error) {
	if bw, ok := c.(interface {
		WriteBuffers(net.Buffers) (int64, error)
	}); ok {
		return bw.WriteBuffers(bufs)
	}
	return bufs.WriteTo(c)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBulk is a 16 MiB request and a 16 MiB reply on one connection,
// plain and under each authentication: the transport's share of a dense
// push+pull. cpu-ms/op is both sides' CPU time.
func BenchmarkBulk(b *testing.B) {
	dir := b.TempDir()
	if _, err := MakeCerts(CertsConfig{PS: []string{"127.0.0.1"}, Workers: []string{"127.0.0.1"}, Out: dir, Valid: time.Hour}); err != nil {
		b.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		b.Fatal(err)
	}
	const size = 16 << 20
	// tls-2conns splits the bytes over two connections, each moving its half
	// on its own goroutine: what striping a push over several connections
	// could gain at best.
	for _, m := range []struct {
		name string
		f    Files
		k    int
	}{{"none", Files{}, 1}, {"tls", Files{Dir: dir}, 1}, {"tls-2conns", Files{Dir: dir}, 2}} {
		b.Run(m.name, func(b *testing.B) {
			ps, err := Load(m.f, "ps", 0, "127.0.0.1")
			if err != nil {
				b.Fatal(err)
			}
			w, err := Load(m.f, "worker", 0, "")
			if err != nil {
				b.Fatal(err)
			}
			dial := w.Dialer(nil)
			if dial == nil {
				var d net.Dialer
				dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
			}
			k := m.k
			addr := bulkServer(b, ps, size/k)
			type end struct {
				c  net.Conn
				br *bufio.Reader
			}
			var cs []end
			for range k {
				c, err := dial(context.Background(), addr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cs = append(cs, end{c, bufio.NewReaderSize(c, 64<<10)})
			}
			req, rep := make([]byte, size), make([]byte, size)
			b.SetBytes(2 * size)
			cpu0 := cpuTime()
			one := func(j int) error {
				q, r := req[j*size/k:(j+1)*size/k], rep[j*size/k:(j+1)*size/k]
				if _, err := writeBuffersTo(cs[j].c, net.Buffers{q[:16], q[16:]}); err != nil {
					return err
				}
				_, err := io.ReadFull(cs[j].br, r)
				return err
			}
			for b.Loop() {
				errs := make(chan error, k)
				for j := range k {
					go func() { errs <- one(j) }()
				}
				for range k {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
