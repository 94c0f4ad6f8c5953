package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/paramserv/paramserv/internal/memnet"
	"github.com/paramserv/paramserv/internal/replica"
)

// TestMain fails the run if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testCluster struct {
	net      *memnet.Network
	isolated []*atomic.Bool // per ps: what it writes to others is lost
	hosts    []*Host
	lis      []*memnet.Listener
	mu       sync.Mutex
	sums     []map[int]int // per ps, per shard: the sum of the bytes applied
	took     []chan []int

	n, r    int
	timeout time.Duration
	tcp     bool
	addrs   []string
	pad     int // bytes a copy carries beyond its sum (re-replication speed)
	padOnly int // only shard padOnly's copy is padded, if >= 0
	logs    chan logLine

	// shardLock, if set, stands for ps 0's shard lock: its Snapshot takes
	// it (as Server.EncodeCopy does). lockHolder is the goroutine holding
	// it (0: none): a Snapshot on that goroutine (inside Aggregate) would
	// hang taking it, so it counts those in lockedSnapshots and fails
	// instead.
	shardLock       *sync.Mutex
	lockHolder      atomic.Uint64
	lockedSnapshots atomic.Int64
}

type logLine struct {
	at   time.Time
	line string
}

// start starts n hosts over memnet, or over loopback TCP if tcp.
func start(t testing.TB, n, r int, timeout time.Duration, tcp bool) *testCluster {
	t.Helper()
	c := &testCluster{net: memnet.New(), n: n, r: r, timeout: timeout, tcp: tcp, logs: make(chan logLine, 8192), padOnly: -1}
	var addrs []string
	var ls []net.Listener
	for id := 0; id < n; id++ {
		var l net.Listener
		var err error
		if tcp {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		} else {
			var ml *memnet.Listener
			ml, err = c.net.Listen(fmt.Sprintf("ps%d:7000", id))
			c.lis = append(c.lis, ml)
			l = ml
		}
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
		// Before any host starts: a started host applies entries
		// (reading c.sums) while the next ones start.
		c.sums = append(c.sums, map[int]int{})
	}
	c.addrs = addrs
	for id := 0; id < n; id++ {
		c.took = append(c.took, make(chan []int, 16))
		c.isolated = append(c.isolated, new(atomic.Bool))
	}
	for id := 0; id < n; id++ {
		c.hosts = append(c.hosts, c.startHost(t, id, ls[id]))
	}
	t.Cleanup(func() {
		for _, h := range c.hosts {
			h.Close()
		}
	})
	return c
}

// startHost starts ps id's host on l; its copies are sums, and a copy for
// a rejoining ps is the sum in 8 bytes plus c.pad bytes.
func (c *testCluster) startHost(t testing.TB, id int, l net.Listener) *Host {
	t.Helper()
	iso, took, tlog := c.isolated[id], c.took[id], logf(t)
	h, err := Start(HostConfig{
		Config: replica.Config{ID: id, N: c.n, R: c.r, Timeout: c.timeout},
		Addrs:  c.addrs, Listener: l,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			if c.tcp {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			}
			conn, err := c.net.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return lossy{conn, iso}, nil
		},
		Apply: func(e replica.Entry) {
			c.mu.Lock()
			c.sums[id][e.Shard] += int(e.Data.([]byte)[0])
			c.mu.Unlock()
		},
		Snapshot: func(s int) ([]byte, error) {
			if id == 0 && c.shardLock != nil {
				if c.lockHolder.Load() == goroutineID() {
					c.lockedSnapshots.Add(1)
					return nil, errors.New("asked inside Aggregate, whose caller holds the shard's lock")
				}
				c.shardLock.Lock()
				defer c.shardLock.Unlock()
			}
			b := make([]byte, 8+c.padOf(s))
			binary.LittleEndian.PutUint64(b, uint64(c.sum(id, s)))
			return b, nil
		},
		Install: func(s int, b []byte) error {
			if len(b) != 8+c.padOf(s) {
				return fmt.Errorf("a copy of %d bytes, want %d", len(b), 8+c.padOf(s))
			}
			c.mu.Lock()
			c.sums[id][s] = int(binary.LittleEndian.Uint64(b))
			c.mu.Unlock()
			return nil
		},
		TookOver: func(s []int) { took <- s },
		Logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			select {
			case c.logs <- logLine{time.Now(), line}:
			default:
			}
			if tlog != nil {
				tlog("%s", line)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (c *testCluster) padOf(s int) int {
	if c.padOnly >= 0 && s != c.padOnly {
		return 0
	}
	return c.pad
}

func logf(t testing.TB) func(string, ...any) {
	if _, ok := t.(*testing.B); ok {
		return nil
	}
	return t.Logf
}

// lossy loses what is written while its ps is isolated.
type lossy struct {
	net.Conn
	isolated *atomic.Bool
}

func (l lossy) Write(b []byte) (int, error) {
	if l.isolated.Load() {
		return len(b), nil
	}
	return l.Conn.Write(b)
}

// isolate cuts ps id off from the others both ways (or heals it).
func (c *testCluster) isolate(id int, on bool) {
	c.isolated[id].Store(on)
	addr := fmt.Sprintf("ps%d:7000", id)
	if on {
		c.net.Partition(addr)
	} else {
		c.net.Heal(addr)
	}
}

func (c *testCluster) sum(id, s int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sums[id][s]
}

// pushUntil pushes to ps id until it is acknowledged, retrying what a
// worker retries (not the primary yet, catching up, no lease), and fails
// the test after a minute.
func pushUntil(t *testing.T, h *Host, s int, req replica.ReqID, v byte) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.Push(ctx, s, req, []byte{v})
		cancel()
		if err == nil {
			return
		}
		if !errors.Is(err, replica.ErrNotPrimary) && !errors.Is(err, replica.ErrCatchingUp) && !errors.Is(err, replica.ErrNoLease) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("push %v to shard %d: %v", req, s, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("push %v to shard %d not acknowledged within a minute: last %v", req, s, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKilledPrimaryOverMemnet: three ps over the in-memory network, two
// copies; ps 0, primary of shard 0, dies (its listener killed, its
// goroutines stopped) after its last push reached the backup. ps 1 takes
// over after the failover timeout; the worker's retry of that
// push is acknowledged without being applied again.
func TestKilledPrimaryOverMemnet(t *testing.T) { testKilledPrimary(t, false) }

// TestKilledPrimaryOverTCP is the same over loopback TCP: the killed ps's
// listener and connections are closed, as its process's death would.
func TestKilledPrimaryOverTCP(t *testing.T) { testKilledPrimary(t, true) }

func testKilledPrimary(t *testing.T, tcp bool) {
	const timeout = 300 * time.Millisecond
	c := start(t, 3, 2, timeout, tcp)
	for i := 1; i <= 3; i++ {
		pushUntil(t, c.hosts[0], 0, replica.ReqID{Client: 0, N: uint64(i)}, byte(i))
	}
	if got := c.sum(1, 0); got != 6 {
		t.Fatalf("backup ps 1 holds shard 0 sum %d after 3 acknowledged pushes, want 6", got)
	}
	killed := time.Now()
	if !tcp {
		c.lis[0].Kill()
	}
	c.hosts[0].Close()
	pushUntil(t, c.hosts[1], 0, replica.ReqID{Client: 0, N: 3}, 3) // the worker never heard its ack
	took := time.Since(killed)
	select {
	case s := <-c.took[1]:
		if len(s) != 1 || s[0] != 0 {
			t.Errorf("ps 1 took over shards %v, want [0]", s)
		}
	default:
		t.Errorf("ps 1 acknowledged a push to shard 0 without taking it over")
	}
	if got := c.sum(1, 0); got != 6 {
		t.Errorf("after the retry ps 1 holds shard 0 sum %d, want 6 (the retry applied once)", got)
	}
	pushUntil(t, c.hosts[1], 0, replica.ReqID{Client: 0, N: 4}, 4)
	if got := c.sum(1, 0); got != 10 {
		t.Errorf("after a new push ps 1 holds shard 0 sum %d, want 10", got)
	}
	// Logged, not asserted: a wall-clock bound would fail on a loaded machine.
	t.Logf("kill to the first acknowledged push: %v (failover timeout %v)", took.Round(time.Millisecond), timeout)
}

// TestPartitionedPrimaryOverMemnet: ps 0 is cut off from the network; it
// stops acknowledging, ps 1 takes over, and once healed ps 0 refuses
// pushes for good.
func TestPartitionedPrimaryOverMemnet(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := start(t, 3, 2, timeout, false)
	pushUntil(t, c.hosts[0], 0, replica.ReqID{Client: 0, N: 1}, 1)
	c.isolate(0, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	err := c.hosts[0].Push(ctx, 0, replica.ReqID{Client: 0, N: 2}, []byte{2})
	cancel()
	if err == nil {
		t.Fatalf("a partitioned primary acknowledged a push")
	}
	pushUntil(t, c.hosts[1], 0, replica.ReqID{Client: 0, N: 2}, 2)
	if got := c.sum(1, 0); got != 3 {
		t.Errorf("ps 1 holds shard 0 sum %d, want 3", got)
	}
	c.isolate(0, false)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.hosts[0].Push(ctx, 0, replica.ReqID{Client: 0, N: 3}, []byte{3})
		cancel()
		if errors.Is(err, replica.ErrRemoved) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ps 0 healed still answers %v, want %v", err, replica.ErrRemoved)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchTCP16MiB is the baseline: 16 MiB written on a loopback TCP
// connection and a byte answered, the least any shipping to a backup costs.
func benchTCP16MiB(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const size = 16 << 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	var ack [1]byte
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(data); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
	<-done
}

// BenchmarkPush16MiB: one 16 MiB push acknowledged by ps 0 over loopback
// TCP, with 1 copy (no replication: acknowledged at once) and 2 (shipped
// to the backup, decoded, applied, answered). The difference is what
// replication adds to a dense 16 MiB push in this shell.
func BenchmarkPush16MiB(b *testing.B) {
	b.Run("tcp", benchTCP16MiB)
	benchPush(b, 16<<20)
}

// BenchmarkPush1KiB is the same for a small push: what replication adds
// to each push's latency (a round trip to the backup and the loop's hops).
func BenchmarkPush1KiB(b *testing.B) { benchPush(b, 1<<10) }

func benchPush(b *testing.B, size int) {
	for _, r := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", r), func(b *testing.B) {
			c := start(b, 3, r, time.Second, true)
			data := make([]byte, size)
			data[0] = 1
			pushUntilB(b, c.hosts[0], replica.ReqID{Client: 0, N: 1}, data)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := range b.N {
				if err := c.hosts[0].Push(context.Background(), 0, replica.ReqID{Client: 0, N: uint64(i + 2)}, data); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for _, h := range c.hosts {
				h.Close()
			}
		})
	}
}

func pushUntilB(b *testing.B, h *Host, req replica.ReqID, data []byte) {
	deadline := time.Now().Add(time.Minute)
	for h.Push(context.Background(), 0, req, data) != nil {
		if time.Now().After(deadline) {
			b.Fatal("no lease within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAggregateOverMemnet: a sync step by aggregate. The primary holds two
// pushes (applying them to its own copy), logs the step's aggregate, and
// both are acknowledged once the backup holds it. Then ps 0 dies mid-step:
// the push it held but never logged is applied at ps 1, the one logged is
// recognised.
func TestAggregateOverMemnet(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := start(t, 3, 2, timeout, false)
	hold := func(id int, req replica.ReqID, v int) (dup bool, wait func(context.Context) error) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			dup, wait, err := c.hosts[id].Hold(0, req)
			if err == nil {
				if !dup {
					c.mu.Lock()
					c.sums[id][0] += v // the primary's own copy
					c.mu.Unlock()
				}
				return dup, wait
			}
			if time.Now().After(deadline) {
				t.Fatalf("hold %v at ps %d: %v", req, id, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, w1 := hold(0, replica.ReqID{Client: 0, N: 1}, 5)
	_, w2 := hold(0, replica.ReqID{Client: 1, N: 1}, 7)
	if err := c.hosts[0].Aggregate(0, []byte{12}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []func(context.Context) error{w1, w2} {
		if err := w(ctx); err != nil {
			t.Fatalf("the step's acknowledgement: %v", err)
		}
	}
	if got := c.sum(1, 0); got != 12 {
		t.Fatalf("backup ps 1 holds shard 0 sum %d, want 12 (the aggregate)", got)
	}
	hold(0, replica.ReqID{Client: 0, N: 2}, 1) // held, never logged
	c.lis[0].Kill()
	c.hosts[0].Close()
	deadline := time.Now().Add(time.Minute)
	for !c.hosts[1].Serving(0) {
		if time.Now().After(deadline) {
			t.Fatal("ps 1 did not take shard 0 over within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if dup, _ := hold(1, replica.ReqID{Client: 1, N: 1}, 7); !dup {
		t.Errorf("a retry of a push logged with its aggregate was not recognised")
	}
	if dup, _ := hold(1, replica.ReqID{Client: 0, N: 2}, 1); dup {
		t.Errorf("a push held at the dead primary but never logged was taken for a retry")
	}
	_, w3 := hold(1, replica.ReqID{Client: 1, N: 2}, 2)
	if err := c.hosts[1].Aggregate(0, []byte{3}); err != nil {
		t.Fatal(err)
	}
	if err := w3(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.sum(1, 0); got != 15 {
		t.Errorf("ps 1 holds shard 0 sum %d, want 15", got)
	}
}

// TestAggregateLeavesSnapshotsToOthers: a synchronous step's aggregate
// is logged (Aggregate) by the push that completed the step, which holds
// the shard's lock; a copy of the shard for a rejoining ps must then not be
// taken on that goroutine (it would wait for that very lock: ps 2 of a
// sync job hung so, its only other copy of a shard rejoining). Here ps 1
// rejoins while ps 0 completes sync steps of shard 0 under a lock its
// Snapshot also takes: the copy is taken between steps, never inside
// Aggregate, and ps 1 re-replicates.
func TestAggregateLeavesSnapshotsToOthers(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := start(t, 3, 2, timeout, true)
	c.shardLock = new(sync.Mutex)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := uint64(0)
	step := func() {
		t.Helper()
		n++
		req := replica.ReqID{Client: 0, N: n}
		deadline := time.Now().Add(time.Minute)
		for {
			dup, wait, err := c.hosts[0].Hold(0, req)
			if err == nil {
				// The other workers' pushes of the step arrive meanwhile:
				// most of the time something is held.
				time.Sleep(3 * time.Millisecond)
				c.shardLock.Lock() // as Server.Push does, after the hold
				c.lockHolder.Store(goroutineID())
				if !dup {
					c.mu.Lock()
					c.sums[0][0]++
					c.mu.Unlock()
				}
				err = c.hosts[0].Aggregate(0, []byte{1})
				c.lockHolder.Store(0)
				c.shardLock.Unlock()
				if err != nil {
					t.Fatalf("aggregate of step %d: %v", n, err)
				}
				if err := wait(ctx); err != nil {
					t.Fatalf("step %d: %v", n, err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("hold %v at ps 0: %v", req, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 3 {
		step()
	}
	c.hosts[1].Close()
	for range 3 {
		step() // ps 1 voted out meanwhile: ps 0 alone holds shard 0
	}
	l, err := net.Listen("tcp", c.addrs[1])
	if err != nil {
		t.Fatalf("listening again at ps 1's address: %v", err)
	}
	c.mu.Lock()
	c.sums[1] = map[int]int{}
	c.mu.Unlock()
	c.hosts[1] = c.startHost(t, 1, l)
	deadline := time.After(time.Minute)
	for done := false; !done; {
		step()
		for more := true; more; {
			select {
			case l := <-c.logs:
				if strings.HasPrefix(l.line, "ps 1: re-replicated shard 0 from ps 0") {
					done = true
				}
			case <-deadline:
				t.Fatal("ps 1 did not re-replicate shard 0 within a minute")
			default:
				more = false
			}
		}
	}
	if k := c.lockedSnapshots.Load(); k > 0 {
		t.Errorf("%d copies of shard 0 were asked for while the shard's lock was held (inside Aggregate)", k)
	}
	step()
	if a, b := c.sum(0, 0), c.sum(1, 0); a != int(n) || b != int(n) {
		t.Errorf("shard 0: ps 0 holds %d, ps 1 (rejoined) %d; want %d on both", a, b, n)
	}
}

// goroutineID is the calling goroutine's number (from its stack's first
// line, "goroutine N [running]:"): a test's way to tell who holds a lock.
func goroutineID() uint64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// TestRejoinOverTCP: ps 1 is killed and started again at its address
// while pushes go on. The others readmit it, the primaries of its two
// shards send it their copies (1 MiB each here) and then their logs; it
// logs the re-replication, and then holds copies identical to the
// primaries'. ps 0 is killed next: ps 1, now the only other copy of
// shard 0, takes it over with every acknowledged push.
func TestRejoinOverTCP(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := start(t, 3, 2, timeout, true)
	c.pad = 1 << 20
	want := map[int]int{}
	push := func(h *Host, s int, n uint64) {
		pushUntil(t, h, s, replica.ReqID{Client: 0, N: n}, byte(n%7+1))
		want[s] += int(n%7 + 1)
	}
	n := uint64(0)
	for range 3 {
		n++
		push(c.hosts[0], 0, n)
		push(c.hosts[1], 1, n)
	}
	c.hosts[1].Close()
	n++
	push(c.hosts[0], 0, n)
	push(c.hosts[2], 1, n) // after ps 2 took over shard 1
	l, err := net.Listen("tcp", c.addrs[1])
	if err != nil {
		t.Fatalf("listening again at ps 1's address: %v", err)
	}
	c.mu.Lock()
	c.sums[1] = map[int]int{}
	c.mu.Unlock()
	c.hosts[1] = c.startHost(t, 1, l)
	rejoined := map[int]string{}
	deadline := time.After(time.Minute)
	for len(rejoined) < 2 {
		n++
		push(c.hosts[0], 0, n) // pushes go on while ps 1 copies
		push(c.hosts[2], 1, n)
		for more := true; more; {
			select {
			case l := <-c.logs:
				line := l.line
				var s, from, bytes int
				if _, err := fmt.Sscanf(line, "ps 1: re-replicated shard %d from ps %d: %d bytes", &s, &from, &bytes); err == nil {
					rejoined[s] = line
					if bytes != 8+c.pad {
						t.Errorf("%q: want %d bytes", line, 8+c.pad)
					}
				}
			case <-deadline:
				t.Fatalf("ps 1 did not re-replicate shards 0 and 1 within a minute: %v", rejoined)
			default:
				more = false
			}
		}
	}
	for range 3 {
		n++
		push(c.hosts[0], 0, n)
		push(c.hosts[2], 1, n)
	}
	for s, p := range map[int]int{0: 0, 1: 2} {
		if c.sum(p, s) != want[s] || c.sum(1, s) != want[s] {
			t.Errorf("shard %d: primary ps %d holds %d, ps 1 (rejoined) %d; want %d on both", s, p, c.sum(p, s), c.sum(1, s), want[s])
		}
	}
	c.hosts[0].Close()
	pushUntil(t, c.hosts[1], 0, replica.ReqID{Client: 0, N: n}, byte(n%7+1)) // a retry: already held
	if got := c.sum(1, 0); got != want[0] {
		t.Errorf("ps 1 took over shard 0 holding %d, want %d (every acknowledged push, once)", got, want[0])
	}
}

// TestRejoinSpeed measures re-replication against the wire (not with
// -short): a ps rejoins and takes a copy of 64 MiB of its shard 0 from
// ps 0 over loopback TCP; the time from the primary's "sending its copy"
// to the rejoined ps's "re-replicated" line, against 64 MiB written
// through a loopback TCP connection and read on the other side.
func TestRejoinSpeed(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: not with -short")
	}
	const size = 64 << 20
	wire := func() time.Duration {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		done := make(chan time.Time)
		go func() {
			c, err := l.Accept()
			if err != nil {
				close(done)
				return
			}
			io.Copy(io.Discard, c)
			done <- time.Now()
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c.Write(make([]byte, size))
		c.Close()
		return (<-done).Sub(start)
	}
	for round := range 3 {
		const timeout = 300 * time.Millisecond
		c := start(t, 3, 2, timeout, true)
		c.pad, c.padOnly = size, 0
		pushUntil(t, c.hosts[0], 0, replica.ReqID{Client: 0, N: 1}, 1)
		c.hosts[1].Close()
		time.Sleep(2 * timeout)
		l, err := net.Listen("tcp", c.addrs[1])
		if err != nil {
			t.Fatal(err)
		}
		c.hosts[1] = c.startHost(t, 1, l)
		var sent, got time.Time
		deadline := time.After(time.Minute)
		for got.IsZero() {
			select {
			case l := <-c.logs:
				switch {
				case strings.HasPrefix(l.line, "ps 0: sending its copy of shard 0"):
					sent = l.at
				case strings.HasPrefix(l.line, "ps 1: re-replicated shard 0"):
					got = l.at
				}
			case <-deadline:
				t.Fatal("no re-replication of shard 0 within a minute")
			}
		}
		w := min(wire(), wire(), wire())
		d := got.Sub(sent)
		t.Logf("round %d: re-replicated %d MiB in %s (%.0f MB/s); the wire: %s (%.0f MB/s); ratio %.2f",
			round, size>>20, d.Round(time.Millisecond), size/d.Seconds()/1e6, w.Round(time.Millisecond), size/w.Seconds()/1e6, w.Seconds()/d.Seconds())
		for _, h := range c.hosts {
			h.Close()
		}
	}
}
