package shard

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/checkpoint"
	"github.com/paramserv/paramserv/internal/table/sparse"
	"github.com/paramserv/paramserv/internal/vfs"
)

// A restore through a mapped shard file (checkpoint.ReadShardMapped)
// builds the state a restore through a buffer builds, bit for bit, and
// keeps none of the file's memory: the state is read after the mapping is
// released (a table that aliased it would fault the test).
func TestRestoreMappedMatchesRead(t *testing.T) {
	for _, dim := range []int{1, 3} {
		s := ftrlShard(t, 20_000, dim)
		want := s.Cut().Shard()
		dir := t.TempDir()
		info, err := checkpoint.WriteShard(vfs.OS, dir, 5, 0, 1, want)
		if err != nil {
			t.Fatal(err)
		}
		m := checkpoint.Manifest{Step: 5, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
		if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
			t.Fatal(err)
		}
		m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: int64(dim), Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
		if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
			t.Fatal(err)
		}
		if m, err = checkpoint.Load(vfs.OS, dir, 5); err != nil {
			t.Fatal(err)
		}
		restore := func(mapped, overlapped bool) checkpoint.Shard {
			st, mappings, err := restoreOneFrom(m, dir, mapped, overlapped)
			if err != nil {
				t.Fatal(err)
			}
			if mapped && mappings != 1 {
				t.Fatalf("the restore read %d shards, want 1", mappings)
			}
			r := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
			r.Install(st)
			return r.Cut().Shard()
		}
		read, mapped, overlapped := restore(false, false), restore(true, false), restore(true, true)
		if err := checkpoint.DiffTensors(mapped, read); err != nil {
			t.Errorf("dim %d: mapped restore vs read restore: %v", dim, err)
		}
		if err := checkpoint.DiffTensors(overlapped, read); err != nil {
			t.Errorf("dim %d: overlapped restore vs read restore: %v", dim, err)
		}
		if err := checkpoint.DiffTensors(mapped, want); err != nil {
			t.Errorf("dim %d: mapped restore vs the saved state: %v", dim, err)
		}

		// A damaged file is refused before anything is restored.
		path := filepath.Join(dir, checkpoint.CheckpointName(5), info.File)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
			sh, release, err := checkpoint.ReadShardMapped(vfs.OS, dir, m, k)
			defer release()
			return &sh, err
		}, 0, 1, 1, testRunner)
		if err == nil {
			t.Errorf("dim %d: a restore of a damaged file succeeded", dim)
		}
		// Through ReadShardOverlapped the state is built before the
		// checksum is known: Restore waits for it and returns none.
		var releases []func()
		st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
			sh, release, err := checkpoint.ReadShardOverlapped(vfs.OS, dir, m, k)
			releases = append(releases, release)
			return &sh, err
		}, 0, 1, 1, testRunner)
		for _, release := range releases {
			release()
		}
		if !errors.Is(err, checkpoint.ErrChecksum) || st != nil {
			t.Errorf("dim %d: an overlapped restore of a damaged file: state %v, error %v, want none and ErrChecksum", dim, st != nil, err)
		}
	}
}

// A shard file that shrinks while an overlapped restore copies it (or
// whose pages the disk cannot read) is an error, not a fault that ends
// the process: the checksum, Restore's own reads and the table's parallel
// copy (sparse.Table.Import) each turn the fault into an error.
func TestRestoreOverlappedShrunkFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapping is tested on linux")
	}
	s := ftrlShard(t, 40_000, 4)
	dir := t.TempDir()
	info, err := checkpoint.WriteShard(vfs.OS, dir, 5, 0, 1, s.Cut().Shard())
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint.Manifest{Step: 5, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
	if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
		t.Fatal(err)
	}
	m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: 4, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
	if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, checkpoint.CheckpointName(5), info.File)
	for _, keep := range []int64{info.Size * 3 / 4, info.Size / 8} {
		if err := os.Truncate(path, info.Size); err != nil {
			t.Fatal(err)
		}
		st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
			sh, release, err := checkpoint.ReadShardOverlapped(vfs.OS, dir, m, k)
			if err == nil {
				// The file shrinks once its header is read.
				if err := os.Truncate(path, keep); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(release)
			return &sh, err
		}, 0, 1, 1, testRunner)
		if err == nil || st != nil {
			t.Errorf("a file cut to %d of %d bytes while restored: state %v, error %v, want an error", keep, info.Size, st != nil, err)
		}
	}
}

// restoreOneFrom restores the one-ps job of m from dir as a ps does:
// reading each shard into a buffer, or mapped (checked first, or while the
// state is built when overlapped), the mappings released after. It
// returns the state and the number of shards mapped.
func restoreOneFrom(m checkpoint.Manifest, dir string, mapped, overlapped bool) (*State, int, error) {
	var releases []func()
	st, err := Restore(contentsOf(m), func(k int) (*checkpoint.Shard, error) {
		if !mapped {
			sh, err := checkpoint.ReadShard(vfs.OS, dir, m, k)
			return &sh, err
		}
		read := checkpoint.ReadShardMapped
		if overlapped {
			read = checkpoint.ReadShardOverlapped
		}
		sh, release, err := read(vfs.OS, dir, m, k)
		releases = append(releases, release)
		return &sh, err
	}, 0, 1, 1, testRunner)
	for _, release := range releases {
		release()
	}
	return st, len(releases), err
}

// A ps's own shard file is imported as it is, Import checking that its
// keys ascend as it copies them; a file whose keys are out of order (not
// as the writer leaves them: hand-made) is sorted and restores the same
// state, and one with a key twice is refused, whichever way it is read.
func TestRestoreKeysOutOfOrder(t *testing.T) {
	const n, dim = 40_000, 1 // enough rows for the restore's parallel copy
	s := ftrlShard(t, n, dim)
	want := s.Cut().Shard()
	// The table's columns in another order: rows reversed in pairs of
	// halves, so the keys go down once in the middle of the file.
	reorder := func(sh checkpoint.Shard, dup bool) checkpoint.Shard {
		out := sh
		out.Tensors = slices.Clone(sh.Tensors)
		for i, tn := range out.Tensors {
			if !strings.HasPrefix(tn.Name, "emb/") {
				continue
			}
			row := len(tn.Data) / n // bytes a row
			b := make([]byte, 0, len(tn.Data))
			b = append(b, tn.Data[n/2*row:]...)
			b = append(b, tn.Data[:n/2*row]...)
			if dup && tn.Name == checkpoint.KeysName("emb") {
				copy(b[(n/4)*row:(n/4+1)*row], b[(n/4-1)*row:(n/4)*row]) // key n/4 repeats n/4-1's
			}
			out.Tensors[i].Data = b
		}
		return out
	}
	for _, c := range []struct {
		name string
		dup  bool
	}{{"reordered", false}, {"a key twice", true}} {
		dir := t.TempDir()
		info, err := checkpoint.WriteShard(vfs.OS, dir, 5, 0, 1, reorder(want, c.dup))
		if err != nil {
			t.Fatal(err)
		}
		m := checkpoint.Manifest{Step: 5, Mode: "async", NumPS: 1, NumWorkers: 1, Shards: []checkpoint.ShardInfo{info}}
		if err := m.SetTraining(checkpoint.Training{Mode: "async", Optimizer: s.st.layout.Optimizer, Tables: s.st.layout.Tables}); err != nil {
			t.Fatal(err)
		}
		m.Tables = []checkpoint.TableInfo{{Name: "emb", Dim: dim, Slots: []string{"ftrl_n", "ftrl_z"}, Shards: []int{0}}}
		if err := checkpoint.WriteManifest(vfs.OS, dir, m); err != nil {
			t.Fatal(err)
		}
		for _, mapped := range []bool{false, true} {
			st, _, err := restoreOneFrom(m, dir, mapped, mapped)
			if c.dup {
				if !errors.Is(err, sparse.ErrUnordered) || st != nil {
					t.Errorf("%s, mapped %v: state %v, error %v, want ErrUnordered", c.name, mapped, st != nil, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s, mapped %v: %v", c.name, mapped, err)
			}
			r := New(Config{NumWorkers: 1, Incarnation: func() uint64 { return 1 }})
			r.Install(st)
			if err := checkpoint.DiffTensors(r.Cut().Shard(), want); err != nil {
				t.Errorf("%s, mapped %v: restored vs the saved state: %v", c.name, mapped, err)
			}
		}
	}
}
