// Package mix holds the 64-bit mixing functions that placement, the sparse
// table and the synthetic data share to spread keys and to draw
// deterministic values from them. Both are bijections of uint64 in which
// every output bit depends on every input bit. Their outputs are part of
// what the project computes (placement of keys, initial rows, generated
// data), so they must never change.
package mix

// SplitMix64 is the output function of the SplitMix64 generator (Steele,
// Lea and Flood, 2014).
func SplitMix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Murmur3 is MurmurHash3's 64-bit finaliser, fmix64.
func Murmur3(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
