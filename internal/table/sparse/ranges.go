package sparse

import (
	"math"

	"github.com/paramserv/paramserv/internal/optim"
)

// Ranges reports the range of every value of the rows in memory (param)
// and of each state slot (state, the rule's StateSlots of them), and false
// if one is NaN or ±Inf. An empty table gives empty ranges ([0, 0]). It
// reads every row once, in memory order, and changes nothing: a caller that
// bounds updates by the rule (optim.Bounded) measures a table with it
// instead of trying each push on copies.
func (t *Table) Ranges() (param optim.Range, state []optim.Range, ok bool) {
	d, slots := t.dim, t.slots
	lo := make([]float32, slots+1)
	hi := make([]float32, slots+1)
	for s := range lo {
		lo[s], hi[s] = float32(math.Inf(1)), float32(math.Inf(-1))
	}
	bad := false
	t.forLive(func(_ int, p *page, o int) {
		row := p.data[o*t.stride : (o+1)*t.stride : (o+1)*t.stride]
		for s := range slots + 1 {
			for _, x := range row[s*d : (s+1)*d] {
				bad = bad || math.Float32bits(x)&0x7f800000 == 0x7f800000
				lo[s] = min(lo[s], x)
				hi[s] = max(hi[s], x)
			}
		}
	})
	if t.live == 0 {
		clear(lo)
		clear(hi)
	}
	if bad {
		return optim.Range{}, nil, false
	}
	state = make([]optim.Range, slots)
	for s := range state {
		state[s] = optim.Range{Lo: float64(lo[s+1]), Hi: float64(hi[s+1])}
	}
	return optim.Range{Lo: float64(lo[0]), Hi: float64(hi[0])}, state, true
}

// Resolved reports whether every key of ks has a row of t that ks
// remembers, no two the same: a push of ks then updates each of those rows
// once and creates none, as long as nothing changes t before it.
func (ks *KeySet) Resolved(t *Table) bool {
	return ks.table == t && ks.gen == t.gen && len(ks.rows) == len(ks.keys) && ks.full && ks.distinct
}
