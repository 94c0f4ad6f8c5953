package synth

import (
	"math"
	"math/bits"

	"github.com/paramserv/paramserv/internal/mix"
)

// hllP is the HyperLogLog precision: 2^hllP one-byte registers, a relative
// standard error of 1.04/sqrt(2^hllP), about 0.8%.
const hllP = 14

// hll estimates the number of distinct uint64 keys added to it.
type hll struct {
	reg [1 << hllP]uint8
}

func (h *hll) add(key uint64) {
	x := mix.SplitMix64(key) // keys from CatKey are already mixed; this makes hll safe for any keys
	i := x >> (64 - hllP)
	rho := uint8(bits.LeadingZeros64(x<<hllP|1<<(hllP-1))) + 1
	if rho > h.reg[i] {
		h.reg[i] = rho
	}
}

func (h *hll) merge(o *hll) {
	for i, r := range o.reg {
		h.reg[i] = max(h.reg[i], r)
	}
}

func (h *hll) estimate() float64 {
	const m = float64(1 << hllP)
	sum, zeros := 0.0, 0
	for _, r := range h.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros)) // linear counting for small sets
	}
	return e
}
