//go:build !amd64 || purego

package optim

// sgdKernel is the vector kernel of sgd where there is one; here there is
// none, and sgd.Update does every value.
func sgdKernel(param, grad []float32, lr float64) int { return 0 }
