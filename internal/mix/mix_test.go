package mix

import "testing"

// The published values: SplitMix64's first output from seed 0 (the state
// advanced once by the golden gamma), and MurmurHash3's fmix64 of 1 and of
// 2^64-1 as the reference C code gives them.
func TestKnownValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       func(uint64) uint64
		in, out uint64
	}{
		{"SplitMix64", SplitMix64, 0x9e3779b97f4a7c15, 0xe220a8397b1dcdaf},
		{"SplitMix64", SplitMix64, 0, 0},
		{"Murmur3", Murmur3, 0, 0},
		{"Murmur3", Murmur3, 1, 0xb456bcfc34c2cb2c},
		{"Murmur3", Murmur3, ^uint64(0), 0x64b5720b4b825f21},
	} {
		if got := tc.f(tc.in); got != tc.out {
			t.Errorf("%s(%#x) = %#x, want %#x", tc.name, tc.in, got, tc.out)
		}
	}
}
