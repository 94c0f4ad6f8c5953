package ckptformat

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// A tensor's bytes come back as the values it was made of, bit for bit,
// by copy, view or fill; reading it as another type is an ErrDType.
func TestTensorRoundTrip(t *testing.T) {
	v := []float32{1, float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 3.5}
	byFill := Float32TensorFill("w", []int64{4}, func(dst []float32, i int) { copy(dst, v[i:]) })
	filled := make([]byte, byFill.ByteSize())
	byFill.Fill(filled, 0)
	for _, tc := range []struct {
		name string
		t    Tensor
	}{
		{"copy", Float32Tensor("w", []int64{4}, v)},
		{"of", Float32TensorOf("w", []int64{4}, v)},
		{"fill", Tensor{Name: "w", DType: F32, Shape: []int64{4}, Data: filled}},
	} {
		got, err := tc.t.Float32s()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.EqualFunc(got, v, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Errorf("%s: %v, want %v", tc.name, got, v)
		}
		if _, err := tc.t.Int64s(); !errors.Is(err, ErrDType) {
			t.Errorf("%s: Int64s of an F32 tensor: %v, want ErrDType", tc.name, err)
		}
	}
	sh := Shard{Tensors: []Tensor{Uint64Tensor(KeysName("emb"), []int64{2}, []uint64{7, 9})}}
	if keys, err := sh.Uint64s("emb/keys"); err != nil || !slices.Equal(keys, []uint64{7, 9}) {
		t.Errorf("Uint64s(emb/keys) = %v, %v", keys, err)
	}
	if _, err := sh.Lookup("emb/values"); !errors.Is(err, ErrNoTensor) {
		t.Errorf("Lookup of a missing tensor: %v, want ErrNoTensor", err)
	}
}

// DataSize refuses a negative dimension and a size past int64.
func TestDataSize(t *testing.T) {
	for _, tc := range []struct {
		d     DType
		shape []int64
		n     int64
		ok    bool
	}{
		{F32, []int64{3, 2}, 24, true},
		{U64, nil, 8, true},
		{I64, []int64{-1}, 0, false},
		{F32, []int64{1 << 62, 4}, 0, false},
	} {
		if n, ok := DataSize(tc.d, tc.shape); n != tc.n || ok != tc.ok {
			t.Errorf("DataSize(%s, %v) = %d, %v; want %d, %v", tc.d, tc.shape, n, ok, tc.n, tc.ok)
		}
	}
}
