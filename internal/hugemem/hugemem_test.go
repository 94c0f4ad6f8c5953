package hugemem

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestFloat32s(t *testing.T) {
	for _, n := range []int{0, 1, 1000, MinBytes/4 - 1, MinBytes / 4, 3<<20 + 5} {
		b := Float32s(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Float32s(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, x := range b {
			if x != 0 {
				t.Fatalf("Float32s(%d)[%d] = %v, want 0", n, i, x)
			}
		}
		if 4*n >= MinBytes && addr(b)%PageSize != 0 {
			t.Errorf("Float32s(%d) starts at %#x, not on a 2 MiB boundary", n, addr(b))
		}
	}
}

func TestGrow(t *testing.T) {
	var b []float32
	for i := range 3 << 20 {
		b = Grow(b, 1)
		b = append(b, float32(i))
	}
	for i, x := range b {
		if x != float32(i) {
			t.Fatalf("b[%d] = %v after growing", i, x)
		}
	}
	if c := cap(b); c < len(b) || c > 2*len(b)+PageSize {
		t.Errorf("cap %d for len %d", c, len(b))
	}
	same := Grow(b[:10], 5)
	if &same[:1][0] != &b[0] {
		t.Error("Grow reallocated a slice with room to spare")
	}
}

// TestHugePages checks that advice moves a buffer the heap has already
// touched onto huge pages, where the kernel offers them to a process that
// asks (transparent huge pages "madvise") and accepts the advice, and that
// a fresh buffer from Float32s is on them too. It runs in a child process:
// smaps counts huge pages per mapping, and the kernel merges mappings with
// the same advice, so only a process that has advised nothing before can
// tell this buffer's pages from those of earlier ones.
func TestHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge page advice is Linux only")
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || !strings.Contains(string(mode), "[madvise]") {
		t.Skipf("transparent huge pages are not on advice here (%q, %v)", mode, err)
	}
	if os.Getenv(childEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHugePages$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- ") {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("child process skipped:\n%s", out)
		}
		t.Logf("child process:\n%s", out)
		return
	}
	const n = 8 << 20 // 32 MiB
	b := aligned(n)
	for i := range b {
		b[i] = float32(i) + 0.1
	}
	if kb := anonHugeKB(t, addr(b)); kb != 0 {
		t.Fatalf("a buffer touched without advice already has %d kB on huge pages", kb)
	}
	if err := advise(bytesOf(b)); err != nil {
		t.Skipf("the kernel refused the advice: %v", err)
	}
	if kb := anonHugeKB(t, addr(b)); kb < n*4/1024 {
		t.Errorf("after advice, %d kB of the 32 MiB buffer's mapping are on huge pages", kb)
	}
	for i, x := range b {
		if x != float32(i)+0.1 {
			t.Fatalf("b[%d] = %v after advice, want %v", i, x, float32(i)+0.1)
		}
	}

	fresh := Float32s(n)
	if kb := anonHugeKB(t, addr(fresh)); kb < n*4/1024 {
		t.Errorf("%d kB of a 32 MiB buffer from Float32s are on huge pages", kb)
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(fresh)
}

const childEnv = "PARAMSERV_HUGEMEM_CHILD"

func addr(b []float32) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// anonHugeKB reads AnonHugePages of the mapping containing a from
// /proc/self/smaps.
func anonHugeKB(t *testing.T, a uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(a) >= l && uint64(a) < h
				continue
			}
		}
		if in && fields[0] == "AnonHugePages:" && len(fields) >= 2 {
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				t.Fatalf("/proc/self/smaps: %q: %v", line, err)
			}
			return kb
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x in /proc/self/smaps", a)
	return 0
}
