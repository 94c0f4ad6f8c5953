package idx_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/idx"
	"github.com/paramserv/paramserv/internal/testutil"
)

// encode builds an unsigned-byte IDX file with the given dimensions and data.
func encode(dims []int, data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, idx.TypeUint8, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	return b.Bytes()
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestReadValid(t *testing.T) {
	raw := encode([]int{2, 3, 4}, seq(24))
	for name, in := range map[string][]byte{"plain": raw, "gzip": gz(raw)} {
		t.Run(name, func(t *testing.T) {
			f, err := idx.Read(bytes.NewReader(in), "x.idx")
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(f.Dims) != "[2 3 4]" || !bytes.Equal(f.Data, seq(24)) {
				t.Fatalf("got dims %v data %v", f.Dims, f.Data)
			}
		})
	}
}

func TestReadEmptyDim(t *testing.T) {
	f, err := idx.Read(bytes.NewReader(encode([]int{0, 28, 28}, nil)), "empty")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Data) != 0 || len(f.Dims) != 3 {
		t.Fatalf("got %v, %d bytes", f.Dims, len(f.Data))
	}
}

func TestReadErrors(t *testing.T) {
	images := encode([]int{3, 28, 28}, seq(3*784))
	tests := []struct {
		name string
		in   []byte
		kind error
		want string // the whole message
	}{
		{"truncated data", images[:16+1234], idx.ErrTruncated,
			"train-images-idx3-ubyte.gz: truncated: header says 3×28×28 = 2352 bytes of data, found 1234"},
		{"truncated gzip", gz(images)[:200], idx.ErrTruncated,
			"train-images-idx3-ubyte.gz: truncated: header says 3×28×28 = 2352 bytes of data, found "},
		{"truncated header", images[:10], idx.ErrTruncated,
			"train-images-idx3-ubyte.gz: truncated: magic says 3 dimensions (12 header bytes), found 6"},
		{"truncated magic", images[:3], idx.ErrTruncated,
			"train-images-idx3-ubyte.gz: truncated: want a 4-byte IDX magic number, found 3 bytes"},
		{"empty", nil, idx.ErrTruncated,
			"train-images-idx3-ubyte.gz: truncated: want a 4-byte IDX magic number, found 0 bytes"},
		{"trailing", append(encode([]int{2}, []byte{1, 2}), 9, 9, 9), idx.ErrTrailing,
			"train-images-idx3-ubyte.gz: trailing data: header says 2 = 2 bytes of data, found 5"},
		{"wrong magic", []byte("PK\x03\x04 this is a zip file"), idx.ErrMagic,
			"train-images-idx3-ubyte.gz: not an IDX file: magic 0x504b0304, want 0x0000TTNN"},
		{"wrong magic in gzip", gz([]byte("<html>not found</html>")), idx.ErrMagic,
			"train-images-idx3-ubyte.gz: not an IDX file: magic 0x3c68746d (after gunzip), want 0x0000TTNN"},
		{"zero dims", []byte{0, 0, 8, 0}, idx.ErrMagic, "magic 0x00000800"},
		{"float type", []byte{0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}, idx.ErrType,
			"unsupported element type 0x0d (float) in magic 0x00000d01: only unsigned bytes (0x08) are supported"},
		{"too large", encode([]int{1 << 16, 1 << 16}, nil), idx.ErrTooLarge,
			"header announces 65536×65536 values, more than the limit of 1073741824 bytes"},
		{"bad gzip", append([]byte{0x1f, 0x8b}, "garbage"...), idx.ErrRead, "bad gzip header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := idx.Read(bytes.NewReader(tt.in), "train-images-idx3-ubyte.gz")
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want kind %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q\nwant it to contain %q", err, tt.want)
			}
			var e *idx.Error
			if !errors.As(err, &e) || e.File != "train-images-idx3-ubyte.gz" {
				t.Fatalf("err %v is not an *idx.Error naming the file", err)
			}
		})
	}
}

func TestReadGzipChecksum(t *testing.T) {
	in := gz(encode([]int{4}, seq(4)))
	in[len(in)-8] ^= 0xff // CRC-32 in the trailer
	_, err := idx.Read(bytes.NewReader(in), "x.gz")
	if !errors.Is(err, idx.ErrRead) || !errors.Is(err, gzip.ErrChecksum) {
		t.Fatalf("err = %v, want idx.ErrRead wrapping gzip.ErrChecksum", err)
	}
}

func TestReadFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t10k-labels-idx1-ubyte.gz")
	if err := os.WriteFile(path, gz(encode([]int{10000}, seq(100))), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := idx.ReadFile(path)
	want := path + ": truncated: header says 10000 = 10000 bytes of data, found 100 (after gunzip)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if _, err := idx.ReadFile(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want os.ErrNotExist", err)
	}
}

func TestReadMNIST(t *testing.T) {
	dir := filepath.Join(testutil.DataDir(t, "mnist"), "mnist")
	for _, tt := range []struct {
		file string
		dims string
	}{
		{"t10k-labels-idx1-ubyte.gz", "[10000]"},
		{"t10k-images-idx3-ubyte.gz", "[10000 28 28]"},
	} {
		if testing.Short() && strings.Contains(tt.file, "images") {
			continue
		}
		f, err := idx.ReadFile(filepath.Join(dir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(f.Dims) != tt.dims {
			t.Errorf("%s: dims %v, want %s", tt.file, f.Dims, tt.dims)
		}
	}
}

func FuzzRead(f *testing.F) {
	for _, in := range [][]byte{
		encode([]int{3}, []byte{7, 2, 1}),
		encode([]int{2, 2, 2}, seq(8)),
		encode([]int{1, 28, 28}, seq(784)),
		gz(encode([]int{2, 3}, seq(6))),
		encode([]int{0}, nil),
		{0, 0, 8, 1, 0xff, 0xff, 0xff, 0xff},
	} {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		file, err := idx.Read(bytes.NewReader(in), "fuzz")
		if err != nil {
			var e *idx.Error
			if !errors.As(err, &e) || e.File != "fuzz" {
				t.Fatalf("error %v is not an *idx.Error naming the input", err)
			}
			return
		}
		n := 1
		for _, d := range file.Dims {
			n *= d
		}
		if len(file.Dims) == 0 || len(file.Dims) > idx.MaxDims || n != len(file.Data) {
			t.Fatalf("dims %v do not match %d bytes of data", file.Dims, len(file.Data))
		}
	})
}

func ExampleRead() {
	// Two 2×2 images of unsigned bytes: magic 0x00000803, then 2, 2, 2.
	in := []byte{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 64, 128, 255, 1, 2, 3, 4}
	f, err := idx.Read(bytes.NewReader(in), "images.idx")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Dims, f.Data[:4])

	_, err = idx.Read(bytes.NewReader(in[:20]), "images.idx")
	fmt.Println(err)
	// Output:
	// [2 2 2] [0 64 128 255]
	// images.idx: truncated: header says 2×2×2 = 8 bytes of data, found 4
}
