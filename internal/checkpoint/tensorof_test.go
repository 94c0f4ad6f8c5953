package checkpoint

import (
	"math"
	"reflect"
	"testing"
)

// The constructors that share a slice's memory give the same tensors, bit
// for bit, as those that copy it.
func TestTensorOfEqualsCopy(t *testing.T) {
	f := []float32{1.5, -0, float32(math.Inf(-1)), math.Float32frombits(0x7fc00123)}
	i := []int64{-1, 0, math.MaxInt64}
	u := []uint64{0, 1, math.MaxUint64}
	pairs := [][2]Tensor{
		{Float32TensorOf("f", []int64{2, 2}, f), Float32Tensor("f", []int64{2, 2}, f)},
		{Int64TensorOf("i", []int64{3}, i), Int64Tensor("i", []int64{3}, i)},
		{Uint64TensorOf("u", []int64{3}, u), Uint64Tensor("u", []int64{3}, u)},
		{Float32TensorOf("e", []int64{0}, nil), Float32Tensor("e", []int64{0}, nil)},
	}
	for _, p := range pairs {
		if !reflect.DeepEqual(p[0], p[1]) {
			t.Errorf("%s: shared %v, copied %v", p[1].Name, p[0], p[1])
		}
	}
	back, err := pairs[0][0].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for k := range f {
		if math.Float32bits(back[k]) != math.Float32bits(f[k]) {
			t.Fatalf("element %d: %08x back, %08x in", k, math.Float32bits(back[k]), math.Float32bits(f[k]))
		}
	}
}
