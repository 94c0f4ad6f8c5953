package checkpoint

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// damagedDir builds a directory with two good checkpoints and, newer than
// them, one with a corrupt shard, one with a truncated shard and one
// interrupted save.
func damagedDir(t *testing.T) vfs.FS {
	fsys := vfs.NewMem()
	for _, step := range []int64{100, 200, 300, 400} {
		mustSave(t, fsys, testDir, step)
	}
	b := readAll(t, fsys, shardPath(testDir, 300, 1))
	b[len(b)-1] ^= 1
	overwrite(t, fsys, shardPath(testDir, 300, 1), b)
	b = readAll(t, fsys, shardPath(testDir, 400, 0))
	overwrite(t, fsys, shardPath(testDir, 400, 0), b[:100])
	if _, err := WriteShard(fsys, testDir, 500, 1, 2, testShards(500)[1]); err != nil {
		t.Fatal(err)
	}
	return fsys
}

func TestListReport(t *testing.T) {
	fsys := damagedDir(t)
	l, err := List(fsys, testDir)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ls_damaged.txt", l.String())
	if l.Entries[4].Status() != "ok" || !errors.Is(l.Entries[1].Err, ErrSize) {
		t.Errorf("entries %+v", l.Entries)
	}
	empty := vfs.NewMem()
	if err := empty.MkdirAll("e", 0o755); err != nil {
		t.Fatal(err)
	}
	l, err = List(empty, "e")
	if err != nil || l.String() != "no checkpoints in e\n" {
		t.Errorf("List of an empty directory = %q, %v", l, err)
	}
}

func TestInspectReport(t *testing.T) {
	fsys := damagedDir(t)
	in, err := Inspect(fsys, testDir, LatestStep)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_latest.txt", in.String())

	in, err = Inspect(fsys, testDir, 100)
	if err != nil || in.Manifest.Step != 100 || len(in.Skipped) != 0 {
		t.Fatalf("Inspect(100) = %+v, %v", in, err)
	}
	_, err = Inspect(fsys, testDir, 300)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "ckpts/ckpt-300: shard-1-of-2.safetensors: checksum mismatch") {
		t.Fatalf("Inspect of a damaged checkpoint: %v", err)
	}
	if _, err = Inspect(fsys, testDir, 42); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Inspect of a missing checkpoint: %v", err)
	}
}

// TestListSetAside: `ckpt ls` shows a set-aside directory, with its reason,
// after the checkpoint of its step.
func TestListSetAside(t *testing.T) {
	fixedNow(t, asideTime)
	fsys := damagedDir(t)
	if _, _, err := LatestSetAside(fsys, testDir); err != nil {
		t.Fatal(err)
	}
	mustSave(t, fsys, testDir, 300)
	l, err := List(fsys, testDir)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ls_set_aside.txt", l.String())
}
