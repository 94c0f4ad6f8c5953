package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paramserv/paramserv/internal/vfs"
)

// directOK says whether dir's filesystem takes O_DIRECT, skipping the test
// where it does not.
func directOK(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if d := startDirect(f); !d.on {
		t.Skipf("%s takes no O_DIRECT", dir)
	}
}

// cached is how many of the file's pages are in the page cache.
func cached(t *testing.T, path string) (in, pages int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		in += int(v & 1)
	}
	return in, len(vec)
}

// A shard streamed to a filesystem that takes O_DIRECT goes past the page
// cache (all but its last, partial block), and its bytes are those the
// page cache's path writes of the same tensors (vfs.Mem has no
// descriptor, so its file is written as before).
func TestWriteShardDirect(t *testing.T) {
	dir := t.TempDir()
	directOK(t, dir)
	fill, _ := streamedShard(3)
	got, err := WriteShard(vfs.OS, dir, 3, 0, 1, fill)
	if err != nil {
		t.Fatal(err)
	}
	mem := vfs.NewMem()
	fill, _ = streamedShard(3)
	want, err := WriteShard(mem, testDir, 3, 0, 1, fill)
	if err != nil {
		t.Fatal(err)
	}
	if got.Checksum != want.Checksum || got.Size != want.Size {
		t.Fatalf("direct: %d bytes, %s; through the page cache: %d bytes, %s", got.Size, got.Checksum, want.Size, want.Checksum)
	}
	path := filepath.Join(dir, CheckpointName(3), got.File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem.Open(filepath.Join(testDir, CheckpointName(3), want.File))
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	if _, err := w.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !bytes.Equal(b, w.Bytes()) {
		t.Fatal("the file written past the page cache differs from the one written through it")
	}
	// ReadFile put the file's pages in the cache: write another and look
	// before reading it.
	fill, _ = streamedShard(4)
	got, err = WriteShard(vfs.OS, dir, 4, 0, 1, fill)
	if err != nil {
		t.Fatal(err)
	}
	in, pages := cached(t, filepath.Join(dir, CheckpointName(4), got.File))
	if pages < 3*crcChunk/os.Getpagesize() || in > 1 {
		t.Fatalf("%d of the file's %d pages are in the page cache after the save: not written past it", in, pages)
	}
}

// A direct write the kernel refuses (here a buffer off a block boundary)
// is written through the page cache, and so is every write after it.
func TestDirectRefusedFallsBack(t *testing.T) {
	dir := t.TempDir()
	directOK(t, dir)
	path := filepath.Join(dir, "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := startDirect(f)
	if !d.on {
		t.Fatal("O_DIRECT is off")
	}
	want := make([]byte, 3*directAlign+100)
	for i := range want {
		want[i] = byte(i * 31)
	}
	b := alignedBuffer(directAlign + 1)
	copy(b[1:], want[:directAlign])
	if k, err := d.Write(b[1:]); k != directAlign || err != nil {
		t.Fatalf("wrote %d bytes of %d (%v)", k, directAlign, err)
	}
	if d.on {
		t.Fatal("a misaligned buffer was taken with O_DIRECT on: the test tests nothing")
	}
	b = alignedBuffer(len(want) - directAlign)
	copy(b, want[directAlign:])
	if k, err := d.Write(b); k != len(b) || err != nil {
		t.Fatalf("wrote %d bytes of %d (%v)", k, len(b), err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the file's bytes are not those written")
	}
}
