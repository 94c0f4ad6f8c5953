package checkpoint

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// fixedNow sets the set-aside clock for one test.
func fixedNow(t *testing.T, tm time.Time) {
	old := now
	now = func() time.Time { return tm }
	t.Cleanup(func() { now = old })
}

var asideTime = time.Date(2026, 11, 24, 19, 52, 22, 0, time.UTC)

// names lists dir's entries.
func names(t *testing.T, fsys vfs.FS, dir string) string {
	t.Helper()
	des, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, de := range des {
		s = append(s, de.Name())
	}
	return strings.Join(s, " ")
}

func flipLastByte(t *testing.T, fsys vfs.FS, name string) {
	t.Helper()
	b := readAll(t, fsys, name)
	b[len(b)-1] ^= 1
	overwrite(t, fsys, name, b)
}

// TestSetAsideThenSaveAgain is failure 9 of issue 12: after a damaged
// newest checkpoint is skipped and an older one restored, the job must be
// able to save again at the damaged one's step. Latest alone leaves the
// damaged directory, and the save fails with ErrExists.
func TestSetAsideThenSaveAgain(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		fixedNow(t, asideTime)
		mustSave(t, fsys, dir, 400)
		mustSave(t, fsys, dir, 500)
		flipLastByte(t, fsys, shardPath(dir, 500, 1))

		// Latest only reads: the save at 500 is still refused.
		if m, _, err := Latest(fsys, dir); err != nil || m.Step != 400 {
			t.Fatalf("Latest = %d, %v", m.Step, err)
		}
		if _, err := save(fsys, dir, 500); !errors.Is(err, ErrExists) {
			t.Fatalf("save over a damaged checkpoint without setting it aside: %v, want ErrExists", err)
		}

		m, skipped, err := LatestSetAside(fsys, dir)
		if err != nil || m.Step != 400 || len(skipped) != 1 {
			t.Fatalf("LatestSetAside = %d, %v, %v", m.Step, skipped, err)
		}
		aside := "ckpt-500.set-aside-20261124T195222Z"
		want := "ckpt-500 damaged: shard-1-of-2.safetensors: checksum mismatch: file has CRC-32C "
		if s := skipped[0]; s.SetAside != aside || s.SetAsideErr != nil || !strings.HasPrefix(s.String(), want) || !strings.HasSuffix(s.String(), "; set aside as "+aside) {
			t.Fatalf("skipped %+v (%v)", s, s)
		}
		if got := names(t, fsys, dir); got != "ckpt-400 "+aside {
			t.Fatalf("directory holds %s", got)
		}
		why, err := readReason(fsys, filepath.Join(dir, aside))
		if err != nil || !strings.HasPrefix(why, "damaged: shard-1-of-2.safetensors: checksum mismatch") {
			t.Fatalf("REASON %q, %v", why, err)
		}
		reason := string(readAll(t, fsys, filepath.Join(dir, aside, ReasonName)))
		if !strings.Contains(reason, "\nckpt-500 set aside at 2026-11-24T19:52:22Z by pid ") {
			t.Errorf("REASON file:\n%s", reason)
		}

		// The job goes on from 400 and saves at 500 again.
		mustSave(t, fsys, dir, 500)
		m, skipped, err = LatestSetAside(fsys, dir)
		if err != nil || m.Step != 500 || len(skipped) != 0 {
			t.Fatalf("after saving again: %d, %v, %v", m.Step, skipped, err)
		}
		checkContent(t, fsys, dir, m)

		// Pruning counts only good checkpoints and keeps the set-aside one.
		removed, err := Prune(fsys, dir, 1)
		if err != nil || strings.Join(removed, " ") != "ckpt-400" {
			t.Fatalf("Prune removed %v, %v", removed, err)
		}
		if got := names(t, fsys, dir); got != "ckpt-500 "+aside {
			t.Fatalf("after Prune the directory holds %s", got)
		}

		// Damaged again at the same step in the same second: a second name.
		mustSave(t, fsys, dir, 600)
		flipLastByte(t, fsys, shardPath(dir, 500, 0))
		mustSave(t, fsys, dir, 400)
		if err := fsys.Remove(manifestPath(dir, 600)); err != nil {
			t.Fatal(err)
		}
		m, skipped, err = LatestSetAside(fsys, dir)
		if err != nil || m.Step != 400 || len(skipped) != 2 || skipped[0].SetAside != "" || skipped[1].SetAside != aside+".1" {
			t.Fatalf("second set-aside: %d, %v, %v", m.Step, skipped, err)
		}

		l, err := List(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range l.Entries {
			got = append(got, e.Name+" "+strings.SplitN(e.Status(), ":", 2)[0])
		}
		if want := "ckpt-600 incomplete|" + aside + " set aside|" + aside + ".1 set aside|ckpt-400 ok"; strings.Join(got, "|") != want {
			t.Errorf("List:\n%s\nwant %s", strings.Join(got, "|"), want)
		}
	})
}

// TestSetAsideLeaves: an unfinished save and a checkpoint that could not
// be read for a cause that may pass are not set aside.
func TestSetAsideLeaves(t *testing.T) {
	fsys := vfs.NewMem()
	mustSave(t, fsys, testDir, 400)
	mustSave(t, fsys, testDir, 500)
	if _, err := WriteShard(fsys, testDir, 600, 0, 2, testShards(600)[0]); err != nil {
		t.Fatal(err)
	}
	eio := vfs.InjectorFunc(func(op vfs.Op, name string) error {
		if op == vfs.OpOpen && strings.HasSuffix(name, filepath.Join(CheckpointName(500), ShardFileName(0, 2))) {
			return syscall.EIO
		}
		return nil
	})
	fsys.SetInjector(eio)
	m, skipped, err := LatestSetAside(fsys, testDir)
	fsys.SetInjector(nil)
	if err != nil || m.Step != 400 || len(skipped) != 2 || skipped[0].SetAside != "" || skipped[1].SetAside != "" {
		t.Fatalf("LatestSetAside = %d, %v, %v", m.Step, skipped, err)
	}
	if got := names(t, fsys, testDir); got != "ckpt-400 ckpt-500 ckpt-600" {
		t.Fatalf("directory holds %s", got)
	}
	// A failure to set aside is reported, not fatal.
	mustSave(t, fsys, testDir, 700)
	flipLastByte(t, fsys, shardPath(testDir, 700, 0))
	fsys.SetInjector(vfs.FailNth(vfs.OpRename, 1, syscall.EACCES))
	m, skipped, err = LatestSetAside(fsys, testDir)
	fsys.SetInjector(nil)
	if err != nil || m.Step != 500 || len(skipped) != 2 || !errors.Is(skipped[0].SetAsideErr, syscall.EACCES) ||
		!strings.Contains(skipped[0].String(), "; could not set it aside: checkpoint: setting aside ckpts/ckpt-700: ") {
		t.Fatalf("LatestSetAside with a failing rename = %d, %v, %v", m.Step, skipped, err)
	}
}

// TestSetAsideConcurrent: several servers restoring at once find the same
// damaged checkpoint; one sets it aside, the others find it gone.
func TestSetAsideConcurrent(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		mustSave(t, fsys, dir, 400)
		mustSave(t, fsys, dir, 500)
		flipLastByte(t, fsys, shardPath(dir, 500, 0))
		const n = 8
		var wg sync.WaitGroup
		got := make([]Manifest, n)
		skips := make([][]Skipped, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { got[i], skips[i], errs[i] = LatestSetAside(fsys, dir) })
		}
		wg.Wait()
		asides := 0
		for i := range n {
			if errs[i] != nil || got[i].Step != 400 {
				t.Fatalf("caller %d: %d, %v", i, got[i].Step, errs[i])
			}
			for _, s := range skips[i] {
				if s.SetAsideErr != nil {
					t.Errorf("caller %d: %v", i, s)
				}
				if s.SetAside != "" {
					asides++
				}
			}
		}
		des, err := fsys.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(des) != 2 || asides != 1 {
			t.Fatalf("%d set it aside; directory holds %s", asides, names(t, fsys, dir))
		}
		if _, ok := parseSetAsideName(des[1].Name()); !ok {
			t.Fatalf("directory holds %s", names(t, fsys, dir))
		}
	})
}

// TestReplaceUnfinishedSave: a checkpoint directory without a manifest at
// the step the job saves again (a save cut short, with a shard of another
// layout and a temporary file left over) is written over.
func TestReplaceUnfinishedSave(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		mustSave(t, fsys, dir, 400)
		if _, err := WriteShard(fsys, dir, 500, 1, 2, testShards(499)[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := WriteShard(fsys, dir, 500, 2, 3, testShards(500)[0]); err != nil {
			t.Fatal(err)
		}
		overwrite(t, fsys, shardPath(dir, 500, 0)+tmpSuffix, []byte("partial"))
		mustSave(t, fsys, dir, 500)
		m, skipped, err := Latest(fsys, dir)
		if err != nil || m.Step != 500 || len(skipped) != 0 {
			t.Fatalf("Latest = %d, %v, %v", m.Step, skipped, err)
		}
		checkContent(t, fsys, dir, m)
	})
}

func TestParseSetAsideName(t *testing.T) {
	for name, want := range map[string]int64{
		"ckpt-5.set-aside-20261124T195222Z":   5,
		"ckpt-5.set-aside-20261124T195222Z.3": 5,
		"ckpt-5.set-aside-2026":               -1,
		"ckpt-05.set-aside-20261124T195222Z":  -1,
		"ckpt-5":                              -1,
		"x.set-aside-20261124T195222Z":        -1,
	} {
		step, ok := parseSetAsideName(name)
		if !ok {
			step = -1
		}
		if step != want {
			t.Errorf("parseSetAsideName(%q) = %d, want %d", name, step, want)
		}
	}
}
