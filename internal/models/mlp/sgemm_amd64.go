//go:build !(cgo && openblas) && amd64 && !purego

package mlp

import "golang.org/x/sys/cpu"

// useFMA selects kernelFMA; GODEBUG=cpu.avx2=off or cpu.fma=off turns it
// off, to run kernelGo on the same machine.
var useFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

var kernelName = map[bool]string{true: "AVX2/FMA assembly", false: "pure Go"}[useFMA]

// kernelFMA is kernel in AVX2 and FMA (sgemm_amd64.s): the 6×16 tile in
// twelve YMM accumulators, each element summed over the sliver in order with
// VFMADD231PS (the product unrounded), then stored or added to c with VADDPS.
//
//go:noescape
func kernelFMA(kc int, a, b, c *float32, ldc int, add bool)
