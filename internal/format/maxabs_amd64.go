//go:build amd64 && !purego

package format

// maxAbsKernel reads the first len(f) rounded down to a multiple of 16
// values with AVX2, eight per instruction; it returns the largest of their
// bits with the sign cleared, and how many values it read.
func maxAbsKernel(f []float32) (m uint32, done int) {
	if !useAVX2 {
		return 0, 0
	}
	return maxAbsAVX2(f)
}

//go:noescape
func maxAbsAVX2(f []float32) (m uint32, done int)
