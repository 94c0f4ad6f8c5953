package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Go benchmarks of the data path, in one process: the ps are served by
// server.ServeListener on loopback listeners, the client is worker 0, and
// the TCP baseline is a goroutine server. Each operation reports MB/s of
// payload (b.SetBytes), keys/s for sparse, and x_tcp: its time per
// operation over the TCP baseline's for the same bytes, measured right
// after it. Every case is verified at the end.
//
//	go test -run '^$' -bench . ./internal/bench/
//	go test -run '^$' -bench 'Dense/16MiB/pushpull' -cpuprofile cpu.out ./internal/bench/

func BenchmarkTiny(b *testing.B) { benchCase(b, Case{Kind: Tiny}) }

func BenchmarkDense(b *testing.B) {
	for _, n := range []int64{1 << 20, 16 << 20} {
		b.Run(FormatBytes(n), func(b *testing.B) { benchCase(b, Case{Kind: Dense, Bytes: n}) })
	}
}

func BenchmarkSparse(b *testing.B) {
	for _, dim := range []int64{1, 8} {
		b.Run(fmt.Sprintf("100k_x%d", dim), func(b *testing.B) { benchCase(b, Case{Kind: Sparse, Keys: 100_000, Dim: dim}) })
	}
}

// BenchmarkTCPBaseline is the bare socket alone, for the dense shapes.
func BenchmarkTCPBaseline(b *testing.B) {
	addr := startBaseline(b)
	for _, n := range []int64{4, 1 << 20, 16 << 20} {
		c := Case{Kind: Dense, Bytes: n}
		for _, op := range Ops {
			b.Run(FormatBytes(n)+"/"+string(op), func(b *testing.B) {
				q, a, payload := c.Shape(op)
				conn, err := DialBaseline(context.Background(), addr, q, a, false)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				b.SetBytes(payload)
				for b.Loop() {
					if err := conn.RoundTrip(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTransport compares the data path with gRPC for the tiny case
// and a 16 MiB variable.
func BenchmarkTransport(b *testing.B) {
	for _, grpcOnly := range []bool{false, true} {
		name := "data"
		if grpcOnly {
			name = "grpc"
		}
		b.Run(name+"/tiny", func(b *testing.B) { benchCaseWith(b, Case{Kind: Tiny}, grpcOnly) })
		b.Run(name+"/16MiB", func(b *testing.B) { benchCaseWith(b, Case{Kind: Dense, Bytes: 16 << 20}, grpcOnly) })
	}
}

func benchCase(b *testing.B, c Case) { benchCaseWith(b, c, false) }

func benchCaseWith(b *testing.B, c Case, grpcOnly bool) {
	ctx := context.Background()
	addr := startBaseline(b)
	s, err := Open(ctx, SessionConfig{NumPS: 1, NumWorkers: 1, Start: InProcessStarter(), Seed: 1, GRPCOnly: grpcOnly}, c)
	if err != nil {
		b.Fatal(err)
	}
	for _, op := range Ops {
		b.Run(string(op), func(b *testing.B) {
			q, a, payload := c.Shape(op)
			b.SetBytes(payload)
			for b.Loop() {
				if err := s.Do(ctx, 0, op); err != nil {
					b.Fatal(err)
				}
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			if c.hasSparse() {
				b.ReportMetric(float64(c.Keys)/perOp.Seconds(), "keys/s")
			}
			ds, err := MeasureBaseline(ctx, addr, q, a, false, 1, max(3, min(b.N, 200)))
			if err != nil {
				b.Fatal(err)
			}
			var sum time.Duration
			for _, d := range ds {
				sum += d
			}
			b.ReportMetric(float64(perOp)/float64(sum/time.Duration(len(ds))), "x_tcp")
		})
	}
	if err := s.Verify(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
