//go:build !(cgo && openblas) && (!amd64 || purego)

package mlp

// Off amd64 (or under -tags purego) kernel is kernelGo.
var useFMA = false

const kernelName = "pure Go"

func kernelFMA(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool) {
	panic("mlp: no kernelFMA in this build")
}

func kernelFMA8(kc int, a *float32, rs, cs int, b, c *float32, ldc int, add bool) {
	panic("mlp: no kernelFMA8 in this build")
}
