package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

// A shard file grown to 1 TiB (a sparse file: a hole after its data) with
// a manifest that records that size is reported from its header, before
// any reader reads past it or allocates it: List, Load, ReadShardFile and
// ReadShardMapped each name the disagreement or the memory it would take.
// Before, each read the whole TiB (60 s and more) before saying so.
func TestHugeSparseShardFailsFast(t *testing.T) {
	dir := filepath.Join(t.TempDir(), testDir)
	m := mustSave(t, vfs.OS, dir, 100)
	const huge = int64(1) << 40
	cdir := filepath.Join(dir, CheckpointName(100))
	if err := os.Truncate(filepath.Join(cdir, m.Shards[0].File), huge); err != nil {
		t.Skipf("no sparse file of 1 TiB here: %v", err)
	}
	if err := os.Remove(filepath.Join(cdir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	m.Shards[0].Size = huge
	if err := WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	const header = "after the end of the last tensor's data (the 1099511627776-byte file was not read further)"
	l, err := Verifier{Finite: true}.List(vfs.OS, dir)
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Err == nil || !strings.Contains(l.Entries[0].Err.Error(), header) {
		t.Fatalf("List: %+v, %v; want damaged by its header", l.Entries, err)
	}
	if _, err := Load(vfs.OS, dir, 100); err == nil || !strings.Contains(err.Error(), header) {
		t.Errorf("Load: %v", err)
	}
	if _, release, err := ReadShardMapped(vfs.OS, dir, m, 0); err == nil || !strings.Contains(err.Error(), header) {
		if release != nil {
			release()
		}
		t.Errorf("ReadShardMapped: %v", err)
	}
	_, err = ReadShardFile(vfs.OS, dir, m, 0)
	if mem := physicalMemory(); mem > 0 && mem < huge {
		if err == nil || !strings.Contains(err.Error(), "more than this machine's memory") {
			t.Errorf("ReadShardFile: %v; want refused for the memory it would take", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), header) {
		t.Errorf("ReadShardFile: %v", err)
	}
}
