package hugemem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestMap(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 3<<20 + 5} {
		m := Map[uint32](n)
		b := m.Slice()
		if len(b) != n || cap(b) < n {
			t.Fatalf("Map(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, x := range b {
			if x != 0 {
				t.Fatalf("Map(%d)[%d] = %v, want 0", n, i, x)
			}
		}
		for i := range b {
			b[i] = uint32(i)
		}
		if n >= PageSize/4 && runtime.GOOS == "linux" {
			if !m.OffHeap() {
				t.Errorf("Map(%d) is on the Go heap", n)
			}
			if a := addr32(b); a%PageSize != 0 {
				t.Errorf("Map(%d) starts at %#x, not on a 2 MiB boundary", n, a)
			}
		}
		m.Free()
		m.Free() // a second Free does nothing
		if m.Slice() != nil {
			t.Errorf("Map(%d): Slice after Free is not nil", n)
		}
	}
	var nilMap *Mapped[byte]
	nilMap.Free()
}

// TestMapUnreachable drops a mapping without Free: the runtime's cleanup
// must unmap it (the process's address space shrinks by its size).
func TestMapUnreachable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mappings are Linux's")
	}
	const size = 1 << 30
	before := vmSize(t)
	func() {
		m := Map[byte](size)
		m.Slice()[0] = 1
		if !m.OffHeap() {
			t.Skip("the system refused the mapping")
		}
	}()
	if vmSize(t) < before+size {
		t.Fatal("the mapping is not in the address space")
	}
	for range 100 {
		runtime.GC()
		runtime.Gosched()
		if vmSize(t) < before+size/2 {
			return
		}
	}
	t.Errorf("a dropped mapping was not unmapped: VmSize %d, %d before it", vmSize(t), before)
}

// vmSize is the process's address space in bytes (VmSize).
func vmSize(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmSize:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}

func addr32(b []uint32) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
