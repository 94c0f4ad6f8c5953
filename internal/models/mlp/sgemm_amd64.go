//go:build !(cgo && openblas) && amd64 && !purego

package mlp

import "golang.org/x/sys/cpu"

// useFMA selects kernelFMA and kernelFMA8; GODEBUG=cpu.avx2=off or
// cpu.fma=off turns them off, to run kernelGo on the same machine.
var useFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

var kernelName = map[bool]string{true: "AVX2/FMA assembly", false: "pure Go"}[useFMA]

// kernelFMA is kernel in AVX2 and FMA (sgemm_amd64.s): the 6×16 tile in
// twelve YMM accumulators, each element summed over k in order with
// VFMADD231PS (the product unrounded), then stored or added to c with
// VADDPS. Row i, column p of a is at a[i·rs + p·cs]; b is a packed sliver.
//
//go:noescape
func kernelFMA(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool)

// kernelFMA8 is kernelFMA for the first 8 columns of the tile only: the
// same operations on each of them, in six accumulators.
//
//go:noescape
func kernelFMA8(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool)
