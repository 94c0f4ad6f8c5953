//go:build amd64 && !purego

package optim

// The rules' vector kernels. Each does what its rule's scalar loop does,
// four values at a time in the float64 lanes of a YMM register: widen the
// float32 inputs (VCVTPS2PD, exact), do the loop's float64 operations in the
// loop's order, one instruction each (VMULPD, VADDPD, VSUBPD, VDIVPD,
// VSQRTPD are IEEE correctly rounded as the scalar SSE2 instructions are;
// no FMA, as Go does not fuse on GOAMD64=v1), and round each stored value to
// float32 once (VCVTPD2PS, round to nearest even, as Go's conversion). So
// the results are bit for bit the scalar loop's. A kernel does the first
// len(param) rounded down to a multiple of 4 values and returns how many it
// did; the rule's scalar loop does the rest. With no AVX2 (or under
// -tags purego, or off amd64) the kernels do nothing.

// kernelMin is the shortest slice worth a kernel call.
const kernelMin = 4

func adamKernel(param, grad, m, v []float32, k *[6]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return adamAVX2(len(param), &param[0], &grad[0], &m[0], &v[0], k)
}

func adamWKernel(param, grad, m, v []float32, k *[8]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return adamWAVX2(len(param), &param[0], &grad[0], &m[0], &v[0], k)
}

func adagradKernel(param, grad, acc []float32, k *[2]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return adagradAVX2(len(param), &param[0], &grad[0], &acc[0], k)
}

func momentumKernel(param, grad, acc []float32, k *[3]float64, nesterov bool) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	if nesterov {
		return nesterovAVX2(len(param), &param[0], &grad[0], &acc[0], k)
	}
	return momentumAVX2(len(param), &param[0], &grad[0], &acc[0], k)
}

func rmspropKernel(param, grad, ms, mom []float32, k *[5]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return rmspropAVX2(len(param), &param[0], &grad[0], &ms[0], &mom[0], k)
}

func ftrlKernel(param, grad, n, z []float32, k *[5]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return ftrlAVX2(len(param), &param[0], &grad[0], &n[0], &z[0], k)
}

//go:noescape
func adamAVX2(n int, param, grad, m, v *float32, k *[6]float64) int

//go:noescape
func adamWAVX2(n int, param, grad, m, v *float32, k *[8]float64) int

//go:noescape
func adagradAVX2(n int, param, grad, acc *float32, k *[2]float64) int

//go:noescape
func momentumAVX2(n int, param, grad, acc *float32, k *[3]float64) int

//go:noescape
func nesterovAVX2(n int, param, grad, acc *float32, k *[3]float64) int

//go:noescape
func rmspropAVX2(n int, param, grad, ms, mom *float32, k *[5]float64) int

//go:noescape
func ftrlAVX2(n int, param, grad, nacc, z *float32, k *[5]float64) int

func proximalSGDKernel(param, grad []float32, k *[4]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return proximalSGDAVX2(len(param), &param[0], &grad[0], k)
}

func proximalAdagradKernel(param, grad, acc []float32, k *[4]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return proximalAdagradAVX2(len(param), &param[0], &grad[0], &acc[0], k)
}

func adadeltaKernel(param, grad, acc, upd []float32, k *[4]float64) int {
	if !useAVX2 || len(param) < kernelMin {
		return 0
	}
	return adadeltaAVX2(len(param), &param[0], &grad[0], &acc[0], &upd[0], k)
}

//go:noescape
func proximalSGDAVX2(n int, param, grad *float32, k *[4]float64) int

//go:noescape
func proximalAdagradAVX2(n int, param, grad, acc *float32, k *[4]float64) int

//go:noescape
func adadeltaAVX2(n int, param, grad, acc, upd *float32, k *[4]float64) int
