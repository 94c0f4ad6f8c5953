package optim

// b2f is 1 for true and 0 for false: a kernel's flag among its constants
// (see kernels_amd64.go).
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
