package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of timed repetitions.
type Summary struct {
	N                     int
	Median, P90, Min, Max time.Duration
}

// Summarize computes the summary of ds (which it does not change). The
// median and the 90th percentile are interpolated linearly between the
// closest ranks (numpy's default), so the median of an even count is the
// mean of the middle two.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Summary{N: len(s), Median: Percentile(s, 0.5), P90: Percentile(s, 0.9), Min: s[0], Max: s[len(s)-1]}
}

// Percentile returns the p-quantile (0 <= p <= 1) of sorted, interpolating
// linearly between the two closest ranks. sorted must be sorted and not
// empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := p * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	frac := rank - float64(lo)
	return sorted[lo] + time.Duration(math.Round(frac*float64(sorted[hi]-sorted[lo])))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// perSecond is n per d, or 0 for d = 0.
func perSecond(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}
