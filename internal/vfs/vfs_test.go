package vfs_test

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

func writeFile(t *testing.T, fsys vfs.FS, name, data string, sync bool) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(fsys vfs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// TestConformance runs the same sequence over the real disk and the fake, so
// the fake cannot drift from what the OS does.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		fsys vfs.FS
		root string
	}{
		{"os", vfs.OS, t.TempDir()},
		{"mem", vfs.NewMem(), "/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys, root := tc.fsys, tc.root
			dir := filepath.Join(root, "a", "b")
			if err := fsys.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsys.MkdirAll(dir, 0o755); err != nil {
				t.Fatalf("MkdirAll of an existing directory: %v", err)
			}
			tmp, final := filepath.Join(dir, "x.tmp"), filepath.Join(dir, "x")
			writeFile(t, fsys, tmp, "hello", true)
			if err := fsys.Rename(tmp, final); err != nil {
				t.Fatal(err)
			}
			if err := fsys.SyncDir(dir); err != nil {
				t.Fatal(err)
			}
			if got, err := readFile(fsys, final); err != nil || got != "hello" {
				t.Fatalf("read back %q, %v; want hello", got, err)
			}
			if _, err := fsys.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Stat of renamed-away name: %v, want ErrNotExist", err)
			}
			fi, err := fsys.Stat(final)
			if err != nil || fi.Size() != 5 || fi.IsDir() || fi.Name() != "x" {
				t.Fatalf("Stat = %v, %v", fi, err)
			}
			// Create truncates.
			writeFile(t, fsys, final, "hi", false)
			if got, _ := readFile(fsys, final); got != "hi" {
				t.Fatalf("after re-Create: %q, want hi", got)
			}
			// CreateExcl refuses an existing name, files and directories.
			for _, n := range []string{final, dir} {
				if _, err := fsys.CreateExcl(n); !errors.Is(err, fs.ErrExist) {
					t.Fatalf("CreateExcl of existing %s: %v, want ErrExist", n, err)
				}
			}
			if got, _ := readFile(fsys, final); got != "hi" {
				t.Fatalf("after a refused CreateExcl: %q, want hi", got)
			}
			f, err := fsys.CreateExcl(filepath.Join(dir, "a"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			ents, err := fsys.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if got := strings.Join(names, ","); got != "a,x" {
				t.Fatalf("ReadDir = %s, want a,x", got)
			}
			if err := fsys.Remove(filepath.Join(root, "a")); err == nil {
				t.Fatal("Remove of a non-empty directory succeeded")
			}
			if _, err := fsys.Open(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Open of a missing file: %v, want ErrNotExist", err)
			}
			if _, err := fsys.Create(filepath.Join(root, "nodir", "f")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Create in a missing directory: %v, want ErrNotExist", err)
			}
			for _, n := range []string{"a", "x"} {
				if err := fsys.Remove(filepath.Join(dir, n)); err != nil {
					t.Fatal(err)
				}
			}
			if err := fsys.Remove(dir); err != nil {
				t.Fatalf("Remove of an empty directory: %v", err)
			}
		})
	}
}

func TestMemCrashKeepsOnlyDurable(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("."); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m, "d/synced-linked", "A", true)
	writeFile(t, m, "d/unsynced-linked", "B", false)
	writeFile(t, m, "d/gone", "G", true)
	if err := m.SyncDir("d"); err != nil {
		t.Fatal(err)
	}
	// After the directory sync: data not synced, a name not synced, a
	// rename not synced, a removal not synced.
	writeFile(t, m, "d/synced-unlinked", "C", true)
	writeFile(t, m, "d/later.tmp", "D", true)
	if err := m.Rename("d/later.tmp", "d/later"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("d/gone"); err != nil {
		t.Fatal(err)
	}
	f, err := m.Create("d/synced-linked") // truncate without sync
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before crash:\n%s", m.Dump())

	m.Crash()

	t.Logf("after crash:\n%s", m.Dump())
	for name, want := range map[string]string{
		"d/synced-linked":   "A",
		"d/unsynced-linked": "",
		"d/gone":            "G",
	} {
		if got, err := readFile(m, name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"d/synced-unlinked", "d/later.tmp", "d/later"} {
		if _, err := m.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the crash (%v)", name, err)
		}
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("write through a handle from before the crash: %v, want ErrClosed", err)
	}
}

func TestMemCrashLosesUnsyncedDirectory(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("top/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m, "top/sub/f", "x", true)
	if err := m.SyncDir("top/sub"); err != nil {
		t.Fatal(err)
	}
	m.Crash() // "top" was never made durable in the root
	if _, err := m.Stat("top"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unsynced directory survived: %v", err)
	}
}

func TestMemRenameDurableAfterSyncDir(t *testing.T) {
	m := vfs.NewMem()
	writeFile(t, m, "f.tmp", "new", true)
	if err := m.Rename("f.tmp", "f"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	m.Crash()
	if got, err := readFile(m, "f"); err != nil || got != "new" {
		t.Fatalf("f = %q, %v", got, err)
	}
	if _, err := m.Stat("f.tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("f.tmp: %v", err)
	}
}

func TestFaults(t *testing.T) {
	m := vfs.NewMem()
	full := vfs.FailFrom(vfs.OpWrite, 2, syscall.ENOSPC)
	m.SetInjector(full)
	f, err := m.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("ab")); err != nil {
		t.Fatalf("first write: %v", err)
	}
	for i := 0; i < 2; i++ {
		n, err := f.Write([]byte("cd"))
		if n != 0 || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write %d on a full disk = %d, %v; want 0, ENOSPC", i+2, n, err)
		}
		if !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("error %q does not say the disk is full", err)
		}
	}
	if !full.Fired() {
		t.Fatal("Fired() = false after a failure")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(m, "f"); got != "ab" {
		t.Fatalf("contents %q, want ab: a failed write must write nothing", got)
	}

	once := vfs.FailNth(vfs.OpSync, 1, nil)
	m.SetInjector(once)
	g, err := m.Create("g")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("first sync: %v, want ErrInjected", err)
	}
	if err := g.Sync(); err != nil {
		t.Fatalf("second sync: %v", err)
	}

	byName := vfs.InjectorFunc(func(op vfs.Op, name string) error {
		if op == vfs.OpRename && strings.HasSuffix(name, ".tmp") {
			return syscall.EIO
		}
		return nil
	})
	m.SetInjector(byName)
	writeFile(t, m, "h.tmp", "", false)
	if err := m.Rename("h.tmp", "h"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("rename: %v, want EIO", err)
	}
	if _, err := m.Stat("h.tmp"); err != nil {
		t.Fatalf("a failed rename must leave the old name: %v", err)
	}
}

func TestOpString(t *testing.T) {
	if got := vfs.OpWrite.String(); got != "write" {
		t.Fatalf("OpWrite = %q", got)
	}
	if got := vfs.Op(99).String(); got != "Op(99)" {
		t.Fatalf("Op(99) = %q", got)
	}
}

// TestLockers: a Locker's lock is held once, seen without being taken,
// and free again after unlock, on the disk and in Mem alike.
func TestLockers(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"OS": vfs.OS, "Mem": vfs.NewMem()} {
		t.Run(name, func(t *testing.T) {
			l, ok := fsys.(vfs.Locker)
			if !ok {
				t.Fatal("not a Locker")
			}
			dir := t.TempDir()
			if err := fsys.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "lock")
			if held, err := l.LockHeld(path); held || err != nil {
				t.Fatalf("LockHeld of a missing file: %v, %v", held, err)
			}
			unlock, err := l.Lock(path)
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Lock(path); !errors.Is(err, vfs.ErrLockHeld) {
				t.Fatalf("a second Lock: %v, want ErrLockHeld", err)
			}
			if held, err := l.LockHeld(path); !held || err != nil {
				t.Fatalf("LockHeld while held: %v, %v", held, err)
			}
			if err := unlock(); err != nil {
				t.Fatal(err)
			}
			if held, err := l.LockHeld(path); held || err != nil {
				t.Fatalf("LockHeld after unlock: %v, %v", held, err)
			}
			again, err := l.Lock(path)
			if err != nil {
				t.Fatalf("Lock after unlock: %v", err)
			}
			again()
		})
	}
}
