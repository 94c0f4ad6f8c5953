//go:build amd64 && !purego

package optim

import "golang.org/x/sys/cpu"

// useAVX2 selects the vector kernel of sgd.
var useAVX2 = cpu.X86.HasAVX2

// sgdKernel does p -= lr*g as sgd.Update does, in float64 rounded once to
// float32, four values per instruction (VCVTPS2PD, VMULPD, VSUBPD,
// VCVTPD2PS round to nearest even, as Go's scalar conversions do, so the
// result is bit for bit the same). It does the first len(param) rounded
// down to a multiple of 8 values and returns how many it did.
func sgdKernel(param, grad []float32, lr float64) int {
	if !useAVX2 || len(param) < 8 {
		return 0
	}
	return sgdAVX2(param, grad[:len(param)], lr)
}

//go:noescape
func sgdAVX2(param, grad []float32, lr float64) int
