package hugemem

import (
	"io"
	"net"
	"runtime"
	"testing"
)

// BenchmarkLoopback receives 16 MiB from a loopback TCP socket into one
// buffer and sends back 16 MiB from another, both on small pages (make) or
// both on huge pages (Float32s): the socket half of a ps's dense push+pull.
// Besides wall time, which
// the peer's share and the machine's noise blur, it reports the CPU time
// of the receiving thread alone (server-cpu-ns/op, where the kernel has
// per-thread clocks), which is where the pages matter. Compare the two
// sub-benchmarks of one run:
//
//	go test -bench Loopback -count 5 ./internal/hugemem/
func BenchmarkLoopback(b *testing.B) {
	const n = 4 << 20 // float32s: 16 MiB
	for _, c := range []struct {
		name  string
		alloc func(int) []float32
	}{
		{"small-pages", func(n int) []float32 { return make([]float32, n) }},
		{"huge-pages", Float32s},
	} {
		b.Run(c.name, func(b *testing.B) {
			in, out := c.alloc(n), c.alloc(n)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			peerDone := make(chan error, 1)
			go func() {
				// The peer sends 16 MiB and reads 16 MiB back, b.N times.
				conn, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					peerDone <- err
					return
				}
				defer conn.Close()
				out, in := make([]byte, 4*n), make([]byte, 4*n)
				for range b.N {
					if _, err := conn.Write(out); err != nil {
						peerDone <- err
						return
					}
					if _, err := io.ReadFull(conn, in); err != nil {
						peerDone <- err
						return
					}
				}
				peerDone <- nil
			}()
			conn, err := l.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			b.SetBytes(2 * 4 * n)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0, cpuOK := threadCPU()
			b.ResetTimer()
			for range b.N {
				if _, err := io.ReadFull(conn, bytesOf(in)); err != nil {
					b.Fatal(err)
				}
				if _, err := conn.Write(bytesOf(out)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if cpu1, ok := threadCPU(); ok && cpuOK {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "server-cpu-ns/op")
			}
			if err := <-peerDone; err != nil {
				b.Fatal(err)
			}
		})
	}
}
