//go:build !amd64 || purego

package optim

// The rules' vector kernels where there are none: each does nothing and the
// rule's scalar loop does every value.

func adamKernel(param, grad, m, v []float32, k *[6]float64) int               { return 0 }
func adamWKernel(param, grad, m, v []float32, k *[8]float64) int              { return 0 }
func adagradKernel(param, grad, acc []float32, k *[2]float64) int             { return 0 }
func momentumKernel(param, grad, acc []float32, k *[3]float64, nest bool) int { return 0 }
func rmspropKernel(param, grad, ms, mom []float32, k *[5]float64) int         { return 0 }
func ftrlKernel(param, grad, n, z []float32, k *[5]float64) int               { return 0 }

// useAVX2 is false: there are no kernels to use.
var useAVX2 = false

func proximalSGDKernel(param, grad []float32, k *[4]float64) int          { return 0 }
func proximalAdagradKernel(param, grad, acc []float32, k *[4]float64) int { return 0 }
func adadeltaKernel(param, grad, acc, upd []float32, k *[4]float64) int   { return 0 }
