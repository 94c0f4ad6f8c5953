package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestEncodeByHand checks the layout byte for byte against a file built by
// hand from the format's description.
func TestEncodeByHand(t *testing.T) {
	tensors := []Tensor{
		Float32Tensor("a", []int64{2}, []float32{1, -2}),
		Uint64Tensor("k", []int64{1}, []uint64{7}),
	}
	// The U64 tensor goes first (widest dtype first), so both stay aligned.
	header := `{"__metadata__":{"who":"test"},` +
		`"k":{"dtype":"U64","shape":[1],"data_offsets":[0,8]},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`
	if len(header) != 138 {
		t.Fatalf("hand-built header is %d bytes, the test assumes 138", len(header))
	}
	var want []byte
	want = append(want, 144, 0, 0, 0, 0, 0, 0, 0) // 138 padded to 144 = 18*8
	want = append(want, header...)
	want = append(want, "      "...)            // 6 spaces of padding
	want = append(want, 7, 0, 0, 0, 0, 0, 0, 0) // k[0] = 7
	want = append(want, 0x00, 0x00, 0x80, 0x3f) // a[0] = 1.0  (0x3f800000)
	want = append(want, 0x00, 0x00, 0x00, 0xc0) // a[1] = -2.0 (0xc0000000)

	var buf bytes.Buffer
	n, err := EncodeSafetensors(&buf, tensors, map[string]string{"who": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.Bytes(); !bytes.Equal(got, want) || n != int64(len(want)) {
		t.Fatalf("encoded %d bytes:\n%q\nwant %d:\n%q", n, got, len(want), want)
	}
	h, got, err := DecodeSafetensors(bytes.NewReader(want), int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	if h.DataStart != 152 || h.Meta["who"] != "test" {
		t.Fatalf("header %+v", h)
	}
	if len(got) != 2 || got[0].Name != "k" || got[1].Name != "a" {
		t.Fatalf("decoded %+v", got)
	}
}

// TestReferenceVectors reproduces the byte strings that the reference
// implementation's own tests (huggingface/safetensors, tensor.rs) expect.
func TestReferenceVectors(t *testing.T) {
	f := []float32{0, 1, 2, 3, 4, 5}
	data := []byte{0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64}
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    []byte
	}{{
		name:    "test_serialization",
		tensors: []Tensor{Float32Tensor("attn.0", []int64{1, 2, 3}, f)},
		want: append(append([]byte{64, 0, 0, 0, 0, 0, 0, 0},
			`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`...), data...),
	}, {
		name:    "test_serialization_forced_alignement",
		tensors: []Tensor{Float32Tensor("attn0", []int64{1, 1, 2, 3}, f)},
		want: append(append([]byte{72, 0, 0, 0, 0, 0, 0, 0},
			`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `...), data...),
	}, {
		name: "test_empty",
		want: []byte{8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32},
	}, {
		name: "test_empty with metadata",
		meta: map[string]string{"framework": "pt"},
		want: []byte{40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
			95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
			116, 34, 125, 125, 32, 32, 32, 32, 32},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := EncodeSafetensors(&buf, tc.tensors, tc.meta); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), tc.want) {
				t.Fatalf("got\n%q\nwant\n%q", buf.Bytes(), tc.want)
			}
			if _, _, err := DecodeSafetensors(bytes.NewReader(tc.want), int64(len(tc.want))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRoundTripBitExact(t *testing.T) {
	quietNaN := math.Float32frombits(0x7fc00001)  // quiet NaN with a payload
	signalNaN := math.Float32frombits(0x7f800002) // signalling NaN
	negNaN := math.Float32frombits(0xffc12345)
	negZero := float32(math.Copysign(0, -1))
	f := []float32{quietNaN, signalNaN, negNaN, negZero, 0, float32(math.Inf(-1)), math.MaxFloat32, math.SmallestNonzeroFloat32}
	i := []int64{math.MinInt64, -1, 0, math.MaxInt64}
	u := []uint64{0, 1, math.MaxUint64}
	in := []Tensor{
		Float32Tensor("f", []int64{2, 4}, f),
		Int64Tensor("i", []int64{4}, i),
		Uint64Tensor("u", []int64{3}, u),
		Float32Tensor("scalar", nil, []float32{negZero}),
		Float32Tensor("empty", []int64{0, 5}, nil),
		Float32Tensor("name with \"quotes\", \\ and \n", []int64{1}, []float32{1}),
	}
	var buf bytes.Buffer
	if _, err := EncodeSafetensors(&buf, in, map[string]string{"k\x01": "v\"\\\t"}); err != nil {
		t.Fatal(err)
	}
	h, out, err := DecodeSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if h.Meta["k\x01"] != "v\"\\\t" {
		t.Fatalf("meta %q", h.Meta)
	}
	got := Shard{Tensors: out}
	for _, w := range in {
		g, err := got.Lookup(w.Name)
		if err != nil {
			t.Fatal(err)
		}
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("%q: got %s %v %x, want %s %v %x", w.Name, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
		}
	}
	gf, err := got.Float32s("f")
	if err != nil {
		t.Fatal(err)
	}
	for k := range f {
		if math.Float32bits(gf[k]) != math.Float32bits(f[k]) {
			t.Errorf("f[%d] = %#x, want %#x", k, math.Float32bits(gf[k]), math.Float32bits(f[k]))
		}
	}
	if gi, _ := got.Int64s("i"); !slices.Equal(gi, i) {
		t.Errorf("i = %v, want %v", gi, i)
	}
	if gu, _ := got.Uint64s("u"); !slices.Equal(gu, u) {
		t.Errorf("u = %v, want %v", gu, u)
	}
	if _, err := got.Int64s("f"); !errors.Is(err, ErrDType) {
		t.Errorf("Int64s of an F32 tensor: %v, want ErrDType", err)
	}
	if _, err := got.Lookup("nope"); !errors.Is(err, ErrNoTensor) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Lookup of a missing tensor: %v", err)
	}
}

func TestEncodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"short data", []Tensor{{Name: "w", DType: F32, Shape: []int64{3}, Data: make([]byte, 8)}}, nil, `tensor "w": shape [3] of F32 needs 12 bytes, data has 8`},
		{"duplicate", []Tensor{Float32Tensor("w", nil, []float32{1}), Float32Tensor("w", nil, []float32{1})}, nil, `tensor "w" appears twice`},
		{"dtype", []Tensor{{Name: "w", DType: "BF16", Data: make([]byte, 2)}}, nil, `dtype "BF16"`},
		{"no name", []Tensor{Float32Tensor("", nil, []float32{1})}, nil, "no name"},
		{"reserved", []Tensor{Float32Tensor("__metadata__", nil, []float32{1})}, nil, "reserved"},
		{"negative dim", []Tensor{{Name: "w", DType: F32, Shape: []int64{-1}}}, nil, "invalid shape"},
		{"overflow", []Tensor{{Name: "w", DType: F32, Shape: []int64{1 << 40, 1 << 40}}}, nil, "invalid shape"},
		{"bad utf8", nil, map[string]string{"k": "\xff"}, "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeSafetensors(&bytes.Buffer{}, tc.tensors, tc.meta)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

// file builds a safetensors file from a raw header (padded as given) and n
// data bytes.
func file(header string, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

func TestReadHeaderRejects(t *testing.T) {
	long := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	past := binary.LittleEndian.AppendUint64(nil, 100)
	for _, tc := range []struct {
		name string
		file []byte
		kind error
		want string
	}{
		{"empty", nil, ErrSize, "too short"},
		{"header too long", append(long, "{}"...), ErrFormat, "exceeds the 100000000-byte limit"},
		{"header past end", append(past, "{}"...), ErrSize, "runs past the end of the 10-byte file"},
		{"not utf8", file("{\"\xff\":1}", 0), ErrFormat, "not valid UTF-8"},
		{"not an object", file(`["a"]`, 0), ErrFormat, "does not start with '{'"},
		{"leading space", file(` {}`, 0), ErrFormat, "does not start with '{'"},
		{"bad json", file(`{"a":{"dtype":"F32",}}`, 0), ErrFormat, "header JSON"},
		{"trailing garbage", file(`{} x`, 0), ErrFormat, "after its closing brace"},
		{"second object", file(`{}{}`, 0), ErrFormat, "after its closing brace"},
		{"NUL padding", file("{}\x00\x00", 0), ErrFormat, "header has more than spaces after its closing brace (invalid character '\\x00'"},
		{"duplicate tensor", file(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`, 8), ErrFormat, `names "a" twice`},
		{"unknown dtype", file(`{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`, 2), ErrFormat, `tensor "a": dtype "BF16" is not supported`},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), ErrFormat, `tensor "a" shape is -1`},
		{"fractional dim", file(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), ErrFormat, `tensor "a" shape is 1.5`},
		{"three offsets", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 4), ErrFormat, `tensor "a": data_offsets has 3 numbers`},
		{"missing field", file(`{"a":{"dtype":"F32","shape":[1]}}`, 4), ErrFormat, `tensor "a": want dtype, shape and data_offsets`},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4), ErrFormat, `tensor "a": unexpected or repeated field "x"`},
		{"repeated field", file(`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4), ErrFormat, `tensor "a": unexpected or repeated field "dtype"`},
		{"tensor not object", file(`{"a":[1]}`, 0), ErrFormat, `tensor "a"`},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), ErrFormat, `tensor "a": data_offsets [4,8] leave a gap`},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), ErrFormat, `tensor "b": data_offsets [4,8] overlap`},
		{"reversed", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4), ErrFormat, `tensor "b": data_offsets [4,0] end before`},
		{"shape vs span", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), ErrFormat, `tensor "a": shape [3] of F32 needs 12 bytes, data_offsets [0,8] span 8`},
		{"shape overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8), ErrFormat, `tensor "a": shape [4294967296 4294967296] overflows`},
		{"trailing data", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 6), ErrFormat, "2 bytes after the end of the last tensor's data"},
		{"truncated data", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 5), ErrSize, "truncated: the tensors need 8 data bytes, the file has 5"},
		{"metadata not strings", file(`{"__metadata__":{"k":1}}`, 0), ErrFormat, `__metadata__["k"] is 1, not a string`},
		{"metadata not object", file(`{"__metadata__":[]}`, 0), ErrFormat, "not an object"},
		{"empty name", file(`{"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4), ErrFormat, "empty name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tc.file), int64(len(tc.file)))
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %v saying %q", err, tc.kind, tc.want)
			}
		})
	}
}

func TestReadHeaderAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"null metadata", file(`{"__metadata__":null}`, 0)},
		{"any key order, out-of-order offsets", file(`{"b":{"data_offsets":[4,12],"shape":[1],"dtype":"I64"},"a":{"shape":[],"dtype":"F32","data_offsets":[0,4]}}`, 12)},
		{"zero-size tensors share an offset", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U64","shape":[2,0],"data_offsets":[0,0]}}`, 0)},
		{"whitespace inside", file("{ \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 4 ] } }\n\t ", 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ReadHeader(bytes.NewReader(tc.file), int64(len(tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(h.Tensors); i++ {
				if h.Tensors[i].Begin != h.Tensors[i-1].End {
					t.Fatalf("tensors not in data order: %+v", h.Tensors)
				}
			}
		})
	}
}

// FuzzReadHeader feeds arbitrary files to the reader. It must never panic
// or allocate more than the input, and whatever it accepts must decode,
// re-encode and decode again to the same tensors.
func FuzzReadHeader(f *testing.F) {
	// Real headers: shards as WriteShard writes them, the reference
	// implementation's vectors, and a few near misses.
	for _, s := range testShards(500) {
		var buf bytes.Buffer
		meta := map[string]string{metaStep: "500", metaShard: "0", metaNumShards: "2", metaVersion: "1"}
		if _, err := EncodeSafetensors(&buf, s.Tensors, meta); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	var buf bytes.Buffer
	EncodeSafetensors(&buf, []Tensor{Float32Tensor("attn.0", []int64{1, 2, 3}, []float32{0, 1, 2, 3, 4, 5})}, nil)
	f.Add(buf.Bytes())
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Add(file(`{"__metadata__":{"framework":"pt"}}`, 0))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Add(file(`{"a":{"dtype":"U64","shape":[18446744073709551615],"data_offsets":[0,8]}}`, 8))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.MaxUint64))

	f.Fuzz(func(t *testing.T, data []byte) {
		h, tensors, err := DecodeSafetensors(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrSize) {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		var pos int64
		for _, e := range h.Tensors {
			if e.Begin != pos {
				t.Fatalf("accepted a gap or overlap at %q: %+v", e.Name, h.Tensors)
			}
			pos = e.End
		}
		if h.DataStart+pos != int64(len(data)) {
			t.Fatalf("accepted data ending at %d in a %d-byte file", h.DataStart+pos, len(data))
		}
		var again bytes.Buffer
		if _, err := EncodeSafetensors(&again, tensors, h.Meta); err != nil {
			t.Fatalf("re-encoding what was read: %v", err)
		}
		h2, tensors2, err := DecodeSafetensors(bytes.NewReader(again.Bytes()), int64(again.Len()))
		if err != nil {
			t.Fatalf("reading back what was re-encoded: %v", err)
		}
		if len(h2.Meta) != len(h.Meta) || len(tensors2) != len(tensors) {
			t.Fatalf("re-encoding changed the file: %+v vs %+v", h2, h)
		}
		byName := Shard{Tensors: tensors2}.ByName()
		for _, a := range tensors {
			b, ok := byName[a.Name]
			if !ok || a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("tensor %q changed in re-encoding", a.Name)
			}
		}
	})
}
