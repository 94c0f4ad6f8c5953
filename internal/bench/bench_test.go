package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	good := map[string]int64{
		"4": 4, "4096": 4096, "1K": 1 << 10, "1k": 1 << 10, "1M": 1 << 20, "16M": 16 << 20, "64M": 64 << 20,
		"1MiB": 1 << 20, "1MB": 1 << 20, "1G": 1 << 30, " 2m ": 2 << 20,
	}
	for in, want := range good {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "0", "-1M", "3", "1.5M", "2G", "1T", "1iB", "x1M", "1MM"} {
		if got, err := ParseBytes(in); !errors.Is(err, ErrSize) {
			t.Errorf("ParseBytes(%q) = %d, %v; want an ErrSize", in, got, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	good := map[string]int64{"1": 1, "5000": 5000, "100k": 100_000, "100K": 100_000, "1M": 1_000_000, "1m": 1_000_000, "100M": 100_000_000}
	for in, want := range good {
		if got, err := ParseKeys(in); err != nil || got != want {
			t.Errorf("ParseKeys(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "0", "-5", "1.5k", "101M", "1G", "1MiB"} {
		if got, err := ParseKeys(in); !errors.Is(err, ErrSize) {
			t.Errorf("ParseKeys(%q) = %d, %v; want an ErrSize", in, got, err)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("1M,16M,64M", ParseBytes)
	if err != nil || len(got) != 3 || got[0] != 1<<20 || got[2] != 64<<20 {
		t.Errorf("ParseList = %v, %v", got, err)
	}
	for _, in := range []string{"", "1M,", ",1M", "1M,,2M", "1M,abc"} {
		if _, err := ParseList(in, ParseBytes); !errors.Is(err, ErrSize) {
			t.Errorf("ParseList(%q): %v, want an ErrSize", in, err)
		}
	}
	if _, err := ParseList("1,8,0", ParseDim); err == nil {
		t.Error("ParseList of dims with a 0 succeeded")
	}
	for n, want := range map[int64]string{4: "4B", 1 << 20: "1MiB", 64 << 20: "64MiB", 1536: "1536B", 3 << 10: "3KiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{100_000: "100k", 1_000_000: "1M", 1234: "1234"} {
		if got := FormatKeys(n); got != want {
			t.Errorf("FormatKeys(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	in := ms(5, 1, 4, 2, 3) // unsorted on purpose
	s := Summarize(in)
	if s.Median != 3*time.Millisecond || s.Min != time.Millisecond || s.Max != 5*time.Millisecond || s.N != 5 {
		t.Errorf("Summarize(1..5) = %+v", s)
	}
	// rank 0.9*4 = 3.6: between 4 and 5 ms.
	if s.P90 != 4600*time.Microsecond {
		t.Errorf("p90 of 1..5 ms = %v, want 4.6ms", s.P90)
	}
	if in[0] != 5*time.Millisecond {
		t.Error("Summarize sorted its input")
	}
	if s := Summarize(ms(1, 2, 3, 10)); s.Median != 2500*time.Microsecond {
		t.Errorf("median of 1,2,3,10 = %v, want 2.5ms", s.Median)
	}
	if s := Summarize(ms(7)); s.Median != 7*time.Millisecond || s.P90 != 7*time.Millisecond {
		t.Errorf("one value: %+v", s)
	}
	if s := Summarize(nil); s.N != 0 || s.Median != 0 {
		t.Errorf("no values: %+v", s)
	}
}

func TestShape(t *testing.T) {
	d := Case{Kind: Dense, Bytes: 1 << 20}
	for op, want := range map[Op][3]int64{Push: {1 << 20, 1, 1 << 20}, Pull: {1, 1 << 20, 1 << 20}, PushPull: {1 << 20, 1 << 20, 2 << 20}} {
		q, a, p := d.Shape(op)
		if [3]int64{q, a, p} != want {
			t.Errorf("dense %s: %d, %d, %d; want %v", op, q, a, p, want)
		}
	}
	s := Case{Kind: Sparse, Keys: 10, Dim: 8}
	for op, want := range map[Op][3]int64{Push: {80 + 320, 1, 400}, Pull: {80, 320, 400}, PushPull: {400, 320, 720}} {
		q, a, p := s.Shape(op)
		if [3]int64{q, a, p} != want {
			t.Errorf("sparse %s: %d, %d, %d; want %v", op, q, a, p, want)
		}
	}
	if q, a, p := (Case{Kind: Tiny}).Shape(PushPull); q != 4 || a != 4 || p != 8 {
		t.Errorf("tiny pushpull: %d, %d, %d", q, a, p)
	}
}

func startBaseline(t testing.TB) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ServeBaseline(lis)
	t.Cleanup(func() { lis.Close() })
	return lis.Addr().String()
}

func TestBaselineEcho(t *testing.T) {
	addr := startBaseline(t)
	ctx := context.Background()
	for _, shape := range [][2]int64{{1, 1}, {1 << 20, 1}, {1, 1 << 20}, {100_000, 100_000}, {5000, 3000}} {
		b, err := DialBaseline(ctx, addr, shape[0], shape[1], false)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			clear(b.rep)
			if err := b.RoundTrip(); err != nil {
				t.Fatalf("%v: %v", shape, err)
			}
			// The server answers from the buffer it read the request into.
			n := min(shape[0], shape[1])
			if !bytes.Equal(b.Reply()[:n], b.req[:n]) {
				t.Fatalf("%v: the reply does not start with the request's bytes", shape)
			}
		}
		b.Close()
	}
	ds, err := MeasureBaseline(ctx, addr, 4096, 4096, false, 2, 5)
	if err != nil || len(ds) != 5 {
		t.Fatalf("MeasureBaseline: %d durations, %v", len(ds), err)
	}
	if _, err := DialBaseline(ctx, addr, 0, 1, false); err == nil {
		t.Error("DialBaseline of an empty request succeeded")
	}
}

// With apply the baseline server applies each request, gradients of 1, to
// its values as sgd at learning rate 1 does, and answers with them.
func TestBaselineApplies(t *testing.T) {
	addr := startBaseline(t)
	const n = 1000
	b, err := DialBaseline(context.Background(), addr, 4*n, 4*n, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for rep := 1; rep <= 3; rep++ {
		if err := b.RoundTrip(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got := math.Float32frombits(binary.LittleEndian.Uint32(b.Reply()[4*i:]))
			if want := float32(i%7 - rep); got != want {
				t.Fatalf("after %d round trips: value %d = %v, want %v", rep, i, got, want)
			}
		}
	}
}

func TestBaselineRejectsBadHeader(t *testing.T) {
	addr := startBaseline(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr [baselineHeader]byte
	binary.LittleEndian.PutUint64(hdr[:8], 1<<40)
	binary.LittleEndian.PutUint64(hdr[8:], 1)
	conn.Write(hdr[:])
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after a bad header: read %d bytes, %v; want the server to close (EOF)", n, err)
	}
}

func TestBaselineServerProcessBody(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunBaselineServer(stdinR, outW) }()
	line := make([]byte, 64)
	n, err := outR.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(string(line[:n]))
	if _, err := MeasureBaseline(context.Background(), addr, 10, 10, false, 0, 2); err != nil {
		t.Fatal(err)
	}
	stdinW.Close() // ends the server
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunBaselineServer: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunBaselineServer did not return within 30s of its stdin closing")
	}
}

func TestCheckValues(t *testing.T) {
	if err := CheckValues("v", []float32{-3, -3, -3}, -3, 1); err != nil {
		t.Fatal(err)
	}
	err := CheckValues("v", []float32{-3, -3, -3, -3, -2, -3}, -3, 2)
	if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "row 2 element 0 is -2") || !strings.Contains(err.Error(), "1 of 6") {
		t.Fatalf("CheckValues with one wrong value: %v", err)
	}
}

func openTest(t *testing.T, numPS, numWorkers int, c Case) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := Open(ctx, SessionConfig{NumPS: numPS, NumWorkers: numWorkers, Start: InProcessStarter(), Seed: 1}, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Verification must notice a push it did not count, for a dense and a
// sparse layout, with one ps and with two.
func TestVerifyDetectsWrongFinalValue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		c  Case
		ps int
	}{
		{Case{Kind: Tiny}, 1},
		{Case{Kind: Dense, Bytes: 4096}, 2},
		{Case{Kind: Sparse, Keys: 50, Dim: 3}, 2},
	} {
		s := openTest(t, tc.ps, 1, tc.c)
		for _, op := range Ops {
			for range 3 {
				if err := s.Do(ctx, 0, op); err != nil {
					t.Fatal(err)
				}
				if op != Push {
					if err := s.CheckLast(); err != nil {
						t.Fatalf("%s: %v", tc.c, err)
					}
				}
			}
		}
		if got := s.Pushes(); got != 6 {
			t.Fatalf("%s: %d pushes counted, want 6", tc.c, got)
		}
		if err := s.Verify(ctx); err != nil {
			t.Fatalf("%s: Verify after the counted pushes: %v", tc.c, err)
		}
		// One push more than counted: the values are -7, the count says 6.
		if call := s.workers[0].c.Do(ctx, s.workers[0].reqs[Push]); call.Err != nil {
			t.Fatal(call.Err)
		}
		err := s.Verify(ctx)
		if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "differ from -6") || !strings.Contains(err.Error(), "is -7") {
			t.Errorf("%s: Verify after an uncounted push: %v; want values -7 reported against -6", tc.c, err)
		}
		// A count one too high is caught as well, by the values and by the ps's counters.
		if err := s.verify(ctx, 8); !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "counted 7 applied") {
			t.Errorf("%s: verify with 8 pushes: %v", tc.c, err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDenseIsSplitAcrossPS(t *testing.T) {
	s := openTest(t, 2, 1, Case{Kind: Dense, Bytes: 4096})
	if s.Parts != 2 {
		t.Errorf("a dense variable on 2 ps is in %d parts, want 2", s.Parts)
	}
	s.Close(context.Background())
	s = openTest(t, 2, 1, Case{Kind: Tiny})
	if s.Parts != 1 {
		t.Errorf("the tiny variable is in %d parts, want 1", s.Parts)
	}
	s.Close(context.Background())
}

// A whole run, in process, with two ps and two workers: every line is
// verified and carries the fields of the JSON schema.
func TestRunInProcess(t *testing.T) {
	addr := startBaseline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var emitted []Result
	results, err := Run(ctx, Config{
		SessionConfig: SessionConfig{NumPS: 2, NumWorkers: 2, Start: InProcessStarter(), Seed: 1},
		Cases: []Case{
			{Kind: Tiny, Warmup: 2, Reps: 5},
			{Kind: Dense, Bytes: 64 << 10, Warmup: 1, Reps: 3},
			{Kind: Sparse, Keys: 200, Dim: 4, Warmup: 1, Reps: 3},
		},
		Ops:          Ops,
		BaselineAddr: addr,
		MemOps:       30, MemBytes: 4096, MemKeys: 20, MemDim: 2,
		Emit: func(r Result) { emitted = append(emitted, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 10 || len(emitted) != 10 {
		t.Fatalf("%d results, %d emitted; want 3 cases x 3 ops + mem", len(results), len(emitted))
	}
	for _, r := range results {
		if !r.Verified || r.MedianMS <= 0 || r.BaselineMedianMS <= 0 || r.RatioToBaseline <= 0 || r.PS != 2 || r.Workers != 2 || r.AggOpsPerS <= 0 {
			t.Errorf("%+v", r)
		}
	}
	// 2 workers x (1+3 push + 1+3 pushpull)
	if r := results[3]; r.Case != "dense" || r.Pushes != 16 || r.Parts != 2 || r.PayloadBytes != 64<<10 {
		t.Errorf("dense push: %+v", r)
	}
	if r := results[8]; r.Case != "sparse" || r.KeysPerS <= 0 || r.Bytes != 200*4*4 || r.Keys != 200 || r.Dim != 4 {
		t.Errorf("sparse pushpull: %+v", r)
	}
	mem := results[9]
	if mem.Case != "mem" || mem.MemReport == nil || mem.Ops != 30 || mem.BenchMallocsPerOp <= 0 {
		t.Errorf("mem: %+v", mem)
	}

	var buf bytes.Buffer
	if err := WriteJSON(&buf, results[0]); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"case", "op", "bytes", "keys", "dim", "median_ms", "p90_ms", "gb_per_s", "keys_per_s", "baseline_median_ms", "ratio_to_baseline", "verified", "ps", "workers"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON line lacks %q: %s", k, buf.Bytes())
		}
	}
	if _, ok := m["mem_ops"]; ok {
		t.Errorf("a non-memory line carries the memory fields: %s", buf.Bytes())
	}
	buf.Reset()
	if err := WriteTable(&buf, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "pushpull") || !strings.Contains(buf.String(), "memory: 30 pushpulls") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// A ps that is gone is an error naming what failed, not a hang.
func TestPSGoneIsAnError(t *testing.T) {
	s := openTest(t, 1, 1, Case{Kind: Tiny})
	s.cl.Close(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Do(ctx, 0, Push); err == nil || !strings.Contains(err.Error(), "worker 0 push") {
		t.Errorf("push to a stopped ps: %v", err)
	}
	for _, w := range s.workers {
		w.c.Close()
	}
}

// ReadProcCPU counts the CPU this process spends.
func TestReadProcCPU(t *testing.T) {
	before, err := ReadProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 1.0
	for i := range 20_000_000 {
		x += float64(i&7) * 1e-9
	}
	after, err := ReadProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after <= before {
		t.Errorf("CPU %v then %v after a busy loop (x %v); want it to grow", before, after, x)
	}
	if _, err := ReadProcCPU(-1); err == nil {
		t.Error("ReadProcCPU(-1) succeeded")
	}
}

// With one worker the baseline's round trips are interleaved with the
// operations; every case is still verified and gets its baseline. In one
// process there is no CPU comparison.
func TestRunInterleaved(t *testing.T) {
	addr := startBaseline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, err := Run(ctx, Config{
		SessionConfig: SessionConfig{NumPS: 1, NumWorkers: 1, Start: InProcessStarter(), Seed: 1},
		Cases:         []Case{{Kind: Dense, Bytes: 64 << 10, Warmup: 1, Reps: 4}, {Kind: Sparse, Keys: 100, Dim: 2, Warmup: 1, Reps: 4}},
		Ops:           Ops,
		BaselineAddr:  addr,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		// 1+4 pushes each by push and by pushpull.
		if !r.Verified || r.Pushes != 10 || r.Reps != 4 || r.BaselineMedianMS <= 0 || r.RatioToBaseline <= 0 || r.CPURatioToBaseline != 0 {
			t.Errorf("%+v", r)
		}
	}
}
