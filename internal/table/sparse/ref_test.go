package sparse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/paramserv/paramserv/internal/optim"
)

// stepRule is a made-up rule that exercises everything a rule can: two
// state slots, a non-zero initial state, and the step argument (so the
// table keeps update counts for it).
type stepRule struct{}

func (stepRule) Name() string    { return "test-step" }
func (stepRule) StateSlots() int { return 2 }
func (stepRule) InitState(st [][]float32) {
	for i := range st[0] {
		st[0][i] = 0.5
	}
}
func (stepRule) Update(p, g []float32, st [][]float32, step int64) {
	for i := range p {
		st[0][i] += g[i] * g[i]
		st[1][i] = 0.9*st[1][i] + g[i]
		p[i] -= 0.1 * st[1][i] / float32(math.Sqrt(float64(st[0][i]))) / float32(step)
	}
}

// plainRule is SGD with a given number of (unused but stored) state slots,
// which says it ignores step.
type plainRule struct{ slots int }

func (r plainRule) Name() string           { return fmt.Sprintf("test-plain%d", r.slots) }
func (r plainRule) StateSlots() int        { return r.slots }
func (plainRule) UsesStep() bool           { return false }
func (plainRule) InitState(st [][]float32) {}
func (plainRule) Update(p, g []float32, st [][]float32, _ int64) {
	for i := range p {
		p[i] -= 0.5 * g[i]
		for _, s := range st {
			s[i] += g[i]
		}
	}
}

// testRules are the rules the model-based tests run: the test rules, and
// every rule of package optim.
func testRules(t testing.TB) []optim.Rule {
	rules := []optim.Rule{stepRule{}, plainRule{0}, plainRule{2}}
	for _, name := range optim.Names() {
		r, err := optim.New(optim.Config{Name: name, LearningRate: 0.05, L1: 0.01, L2: 0.001})
		if err != nil {
			t.Fatalf("optim.New(%q): %v", name, err)
		}
		rules = append(rules, r)
	}
	return rules
}

// refTable is the reference the table is checked against: a map of
// separately allocated rows, exact admission counts, absolute steps.
type refTable struct {
	cfg   Config
	rows  map[uint64]*refRow
	seen  map[uint64]int
	clock int64
	stats Stats
}

type refRow struct {
	value []float32
	state [][]float32
	count uint32
	touch int64
}

func newRef(cfg Config) *refTable {
	if cfg.Init == nil {
		cfg.Init = Zeros{}
	}
	if cfg.MaxRows == 0 {
		cfg.MaxRows = MaxRowsLimit
	}
	return &refTable{cfg: cfg, rows: map[uint64]*refRow{}, seen: map[uint64]int{}}
}

func (m *refTable) acquire(k uint64, step int64) *refRow {
	if r := m.rows[k]; r != nil {
		return r
	}
	if m.cfg.MinCount > 1 {
		m.seen[k]++
		if m.seen[k] < m.cfg.MinCount {
			return nil
		}
	}
	if len(m.rows) >= m.cfg.MaxRows {
		m.stats.CapacityRejects++
		return nil
	}
	r := &refRow{value: make([]float32, m.cfg.Dim), touch: step}
	m.cfg.Init.Init(k, r.value)
	for range m.cfg.Rule.StateSlots() {
		r.state = append(r.state, make([]float32, m.cfg.Dim))
	}
	m.cfg.Rule.InitState(r.state)
	m.rows[k] = r
	m.stats.Admitted++
	return r
}

func (m *refTable) pull(keys []uint64) []float32 {
	d := m.cfg.Dim
	out := make([]float32, len(keys)*d)
	for i, k := range keys {
		if r := m.acquire(k, m.clock); r != nil {
			copy(out[i*d:], r.value)
		} else {
			m.stats.RejectedPulls++
			m.cfg.Init.Init(k, out[i*d:(i+1)*d])
		}
	}
	return out
}

func (m *refTable) push(keys []uint64, grads []float32, step int64) {
	d := m.cfg.Dim
	m.clock = max(m.clock, step)
	for i, k := range keys {
		r := m.acquire(k, m.clock)
		if r == nil {
			m.stats.RejectedPushes++
			continue
		}
		r.count++
		n := int64(r.count)
		if !usesStep(m.cfg.Rule) {
			n = 1
		}
		m.cfg.Rule.Update(r.value, grads[i*d:(i+1)*d], r.state, n)
		r.touch = m.clock
	}
}

func (m *refTable) evict(step int64) int {
	m.clock = max(m.clock, step)
	if m.cfg.EvictAfterSteps == 0 {
		return 0
	}
	n := 0
	for k, r := range m.rows {
		if step-r.touch > m.cfg.EvictAfterSteps {
			delete(m.rows, k)
			n++
		}
	}
	m.stats.Evicted += int64(n)
	return n
}

// export is the reference's Snapshot.
func (m *refTable) export() Snapshot {
	d := m.cfg.Dim
	keys := make([]uint64, 0, len(m.rows))
	for k := range m.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := Snapshot{Dim: d, Keys: keys, Values: []float32{}, State: make([][]float32, m.cfg.Rule.StateSlots())}
	for i := range s.State {
		s.State[i] = []float32{}
	}
	if usesStep(m.cfg.Rule) {
		s.Updates = []uint32{}
	}
	if m.cfg.EvictAfterSteps > 0 {
		s.LastTouch = []int64{}
	}
	for _, k := range keys {
		r := m.rows[k]
		s.Values = append(s.Values, r.value...)
		for i := range s.State {
			s.State[i] = append(s.State[i], r.state[i]...)
		}
		if s.Updates != nil {
			s.Updates = append(s.Updates, r.count)
		}
		if s.LastTouch != nil {
			s.LastTouch = append(s.LastTouch, r.touch)
		}
	}
	return s
}

// bitsEqual compares float slices bit for bit.
func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// diffSnapshots describes the first difference between two snapshots, or
// returns "".
func diffSnapshots(got, want Snapshot) string {
	switch {
	case got.Dim != want.Dim:
		return fmt.Sprintf("Dim %d, want %d", got.Dim, want.Dim)
	case !slices.Equal(got.Keys, want.Keys):
		return fmt.Sprintf("keys\n got %v\nwant %v", head(got.Keys), head(want.Keys))
	case !bitsEqual(got.Values, want.Values):
		return fmt.Sprintf("values\n got %v\nwant %v", head(got.Values), head(want.Values))
	case len(got.State) != len(want.State):
		return fmt.Sprintf("%d state slots, want %d", len(got.State), len(want.State))
	case !slices.Equal(got.Updates, want.Updates) || (got.Updates == nil) != (want.Updates == nil):
		return fmt.Sprintf("updates\n got %v\nwant %v", head(got.Updates), head(want.Updates))
	case !slices.Equal(got.LastTouch, want.LastTouch) || (got.LastTouch == nil) != (want.LastTouch == nil):
		return fmt.Sprintf("last touch\n got %v\nwant %v", head(got.LastTouch), head(want.LastTouch))
	}
	for i := range got.State {
		if !bitsEqual(got.State[i], want.State[i]) {
			return fmt.Sprintf("state %d\n got %v\nwant %v", i, head(got.State[i]), head(want.State[i]))
		}
	}
	return ""
}

func head[T any](s []T) []T { return s[:min(len(s), 40)] }

// statsOf drops the fields the reference does not model.
func statsOf(s Stats) Stats {
	s.Bytes = 0
	return s
}

func (m *refTable) statsNow() Stats {
	s := m.stats
	s.Rows = len(m.rows)
	return s
}

// checkIndex verifies the index against the rows: every live row is in the
// index exactly once under its own tag, every entry's buckets from home to
// its own are full, the free list covers exactly the dead rows below
// highWater, and every key is found.
func checkIndex(t testing.TB, tb *Table) {
	t.Helper()
	if tb.old.slots != nil {
		// Growing: every live row is found in the new index or, only
		// there, in the old one; then the move is finished and the
		// index checked whole.
		tb.forLive(func(r int, p *page, o int) {
			k := p.keys[o]
			got, _ := tb.findNew(k, hashKey(k))
			if got < 0 {
				got = tb.findOld(k, hashKey(k))
			}
			if got != r {
				t.Fatalf("growing index: key %d found at row %d, want %d", k, got, r)
			}
		})
		tb.settle()
		if tb.old.slots != nil {
			t.Fatal("settle left an old index")
		}
	}
	entries := 0
	seen := map[int]bool{}
	nb := tb.nBuckets
	full := func(b uint64) bool {
		return !slices.Contains(tb.index[b*bucketSlots:(b+1)*bucketSlots], 0)
	}
	for pos, s := range tb.index {
		if s == 0 {
			continue
		}
		entries++
		r := int(s&tb.rowMask) - 1
		if r < 0 || r >= tb.highWater {
			t.Fatalf("slot %d holds row %d, highWater %d", pos, r, tb.highWater)
		}
		if seen[r] {
			t.Fatalf("row %d indexed twice", r)
		}
		seen[r] = true
		p := &tb.pages[r>>tb.pageShift]
		o := r & tb.pageMask
		if p.live[o>>6]&(1<<(o&63)) == 0 {
			t.Fatalf("slot %d holds dead row %d", pos, r)
		}
		h := hashKey(p.keys[o])
		if s&^tb.rowMask != uint32(h)&^tb.rowMask {
			t.Fatalf("slot %d: tag %#x, want %#x", pos, s&^tb.rowMask, uint32(h)&^tb.rowMask)
		}
		for b := tb.home(h); b != uint64(pos/bucketSlots); b = (b + 1) % nb {
			if !full(b) {
				t.Fatalf("row %d (key %d) in bucket %d but bucket %d on its way from home %d has room", r, p.keys[o], pos/bucketSlots, b, tb.home(h))
			}
		}
		if got, _ := tb.find(p.keys[o], h); got != r {
			t.Fatalf("find(%d) = %d, want %d", p.keys[o], got, r)
		}
	}
	if entries != tb.live {
		t.Fatalf("index has %d entries, table %d live rows", entries, tb.live)
	}
	free := 0
	for r := tb.freeHead; r >= 0; r = int(tb.keyAt(r)) - 1 {
		if seen[r] {
			t.Fatalf("row %d is both free and indexed", r)
		}
		if free++; free > tb.highWater {
			t.Fatalf("free list loops")
		}
	}
	if free+tb.live != tb.highWater {
		t.Fatalf("%d free + %d live rows != highWater %d", free, tb.live, tb.highWater)
	}
}

// keyPool returns n keys mixing small ids, ids near 2^64 and random ids,
// such that each has a sketch counter of its own in a sketch of width w
// (so the sketch counts them exactly and the reference's exact counts
// apply).
func keyPool(t testing.TB, n, w int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, 0))
	set := map[uint64]bool{}
	var keys []uint64
	for len(keys) < n {
		var k uint64
		switch len(keys) % 3 {
		case 0:
			k = uint64(len(keys))
		case 1:
			k = math.MaxUint64 - uint64(len(keys))
		default:
			k = rng.Uint64()
		}
		if !set[k] {
			set[k] = true
			keys = append(keys, k)
		}
	}
	s := newSketch(w)
	uses := map[uint64]int{}
	for _, k := range keys {
		for _, c := range s.cellsOf(k) {
			uses[c]++
		}
	}
	for _, k := range keys {
		own := false
		for _, c := range s.cellsOf(k) {
			own = own || uses[c] == 1
		}
		if !own {
			t.Fatalf("key %d shares all its sketch counters; pick another pool", k)
		}
	}
	return keys
}
