//go:build amd64 && !purego

package format

import "golang.org/x/sys/cpu"

var useAVX2 = cpu.X86.HasAVX2

// finiteKernel checks the first len(f) rounded down to a multiple of 16
// values with AVX2, eight exponents compared per instruction; it returns
// whether one of them is NaN or ±Inf, and how many values it checked.
func finiteKernel(f []float32) (bad bool, done int) {
	if !useAVX2 {
		return false, 0
	}
	return finiteAVX2(f)
}

//go:noescape
func finiteAVX2(f []float32) (bad bool, done int)
