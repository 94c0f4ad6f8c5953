package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/paramserv/paramserv/internal/vfs"
)

// Skipped is a checkpoint that Latest passed over, and why.
type Skipped struct {
	Name string // "ckpt-500"
	Step int64
	// Err says what is wrong; errors.Is finds ErrIncomplete (no
	// manifest), ErrChecksum, ErrSize, ErrFormat, ErrMismatch,
	// ErrVersion, or fs.ErrNotExist (a shard file is missing).
	Err error
	// SetAside is the name LatestSetAside renamed the damaged checkpoint
	// to ("ckpt-500.set-aside-20260102T030405Z"), and SetAsideErr why it
	// could not; both are empty for Latest.
	SetAside    string
	SetAsideErr error
}

// String reads "ckpt-500 damaged: shard-1-of-2.safetensors: checksum
// mismatch: ..." or "ckpt-600 incomplete: no manifest.json", followed by
// "; set aside as ckpt-500.set-aside-..." after LatestSetAside set it aside
// (or "; could not set it aside: ...").
func (s Skipped) String() string {
	str := s.Name + " " + status(s.Err)
	switch {
	case s.SetAsideErr != nil:
		str += "; could not set it aside: " + s.SetAsideErr.Error()
	case s.SetAside != "":
		str += "; set aside as " + s.SetAside
	}
	return str
}

// status is "ok", "incomplete: why", "set aside: why" or "damaged: why".
func status(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrIncomplete):
		return "incomplete: " + err.Error()
	case errors.Is(err, ErrSetAside):
		return "set aside: " + err.Error()
	}
	return "damaged: " + err.Error()
}

// entry is a checkpoint directory found under dir.
type entry struct {
	name string
	step int64
}

// list returns the checkpoint directories under dir, newest first.
func list(fsys vfs.FS, dir string) ([]entry, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, de := range des {
		if step, ok := parseCheckpointName(de.Name()); ok && de.IsDir() {
			out = append(out, entry{de.Name(), step})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return cmpInt(b.step, a.step) })
	return out, nil
}

// check reads the manifest of the checkpoint at step and verifies its
// shards: all of every file against its checksum (full), or only that each
// file is there with its recorded size. It returns the manifest whenever
// the manifest itself could be read, even if a shard is damaged. Errors
// are reasons.
func check(fsys vfs.FS, dir string, step int64, full bool) (Manifest, error) {
	return checkAs(fsys, dir, step, full, verifyOnly)
}

// checkAs is check, verifying each shard file in mode when full.
func checkAs(fsys vfs.FS, dir string, step int64, full bool, mode readMode) (Manifest, error) {
	cdir := filepath.Join(dir, CheckpointName(step))
	m, err := readManifest(fsys, cdir, step)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, errorf(ErrIncomplete, "no %s", ManifestName)
	}
	if err != nil {
		return Manifest{}, err
	}
	for k, s := range m.Shards {
		if full {
			if _, err := readShard(fsys, cdir, m, k, mode); err != nil {
				return m, err
			}
			continue
		}
		fi, err := fsys.Stat(filepath.Join(cdir, s.File))
		if err != nil {
			return m, fileError(s.File, err)
		}
		if fi.Size() != s.Size {
			return m, errorf(ErrSize, "%s: %d bytes on disk, manifest says %d", s.File, fi.Size(), s.Size)
		}
	}
	if err := checkChain(fsys, dir, m, full, mode); err != nil {
		return m, err
	}
	return m, nil
}

// Latest returns the manifest of the newest valid checkpoint under dir: the
// newest whose manifest parses and is consistent and whose shard files all
// have their recorded sizes and SHA-256 checksums (every file is read
// through). The checkpoints newer than it that were passed over come back in
// skipped, newest first, each with the reason, for the caller to log:
//
//	for _, s := range skipped {
//		log.Printf("%v; using %s", s, checkpoint.CheckpointName(m.Step))
//	}
//
// With no valid checkpoint, the error wraps ErrNotFound (and fs.ErrNotExist
// if dir does not exist) and skipped still lists what was found.
func Latest(fsys vfs.FS, dir string) (m Manifest, skipped []Skipped, err error) {
	return Verifier{}.Latest(fsys, dir)
}

// Verifier says how Latest, LatestSetAside and List verify a checkpoint
// beyond its format; the package's functions of those names are a zero
// Verifier's.
type Verifier struct {
	// Finite: every F32 tensor (values, optimizer state, table rows) must
	// hold only finite numbers, else the checkpoint is damaged (ErrFormat)
	// and set aside by LatestSetAside. A job's checkpoints never hold an
	// infinity or a NaN (the ps refuses an update that would make one), so
	// paramserv's own readers ask for it; the format itself allows them.
	Finite bool
}

func (v Verifier) mode() readMode {
	if v.Finite {
		return verifyFinite
	}
	return verifyOnly
}

// Latest is the package's Latest, verified as v says.
func (v Verifier) Latest(fsys vfs.FS, dir string) (m Manifest, skipped []Skipped, err error) {
	ents, err := list(fsys, dir)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("%w in %s: %w", ErrNotFound, dir, err)
	}
	for _, e := range ents {
		m, err := checkAs(fsys, dir, e.step, true, v.mode())
		if err == nil {
			return m, skipped, nil
		}
		skipped = append(skipped, Skipped{Name: e.name, Step: e.step, Err: err})
	}
	if len(skipped) == 0 {
		return Manifest{}, nil, fmt.Errorf("%w in %s: it holds none", ErrNotFound, dir)
	}
	return Manifest{}, skipped, fmt.Errorf("%w in %s: %d found, none intact (newest: %v)", ErrNotFound, dir, len(skipped), skipped[0])
}

// Load returns the manifest of the checkpoint at step, verified as Latest
// verifies. The error wraps ErrNotFound if there is no such checkpoint
// directory, and says why otherwise.
func Load(fsys vfs.FS, dir string, step int64) (Manifest, error) {
	return Verifier{}.Load(fsys, dir, step)
}

// Load is the package's Load, verified as v says: with Finite, every file
// of a delta checkpoint's chain (its parents back to its base) must hold
// only finite values too.
func (v Verifier) Load(fsys vfs.FS, dir string, step int64) (Manifest, error) {
	cdir := filepath.Join(dir, CheckpointName(step))
	if _, err := fsys.Stat(cdir); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrNotFound, cdir, err)
	}
	m, err := checkAs(fsys, dir, step, true, v.mode())
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: %s: %w", cdir, err)
	}
	return m, nil
}

// DefaultKeep is how many complete checkpoints Prune keeps when told 0.
const DefaultKeep = 5

// Prune deletes old checkpoints under dir: it keeps the newest keep
// (DefaultKeep if keep <= 0) complete checkpoints, deletes the complete
// ones older than those, and deletes any incomplete or damaged checkpoint
// directory older than the newest complete one. Directories newer than the
// newest complete checkpoint are left alone: they may be saves in progress.
// It returns the names of the directories it deleted. It never deletes a
// checkpoint that a kept delta checkpoint is built on (its parent, the
// parent's parent, ... back to its base): those are kept besides the keep
// newest.
//
// "Complete" here means the manifest is intact and every shard file has its
// recorded size; Prune does not re-read the shards to verify checksums, so
// keep at least 2 to survive a newest checkpoint that later proves
// corrupt.
//
// A checkpoint is deleted manifest first (and the directory fsynced), so a
// crash mid-way leaves an incomplete checkpoint, never a complete-looking
// one with files missing.
func Prune(fsys vfs.FS, dir string, keep int) (removed []string, err error) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	ents, err := list(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune %s: %w", dir, err)
	}
	kept := 0
	var errs []error
	// needed: the checkpoints that a kept delta is built on.
	needed := map[int64]bool{}
	for _, e := range ents {
		m, cerr := check(fsys, dir, e.step, false)
		switch {
		case needed[e.step]:
			continue
		case cerr == nil && kept < keep:
			kept++
			for cur := m; cur.IsDelta() && !needed[cur.Parent]; {
				needed[cur.Parent] = true
				p, err := readManifest(fsys, filepath.Join(dir, CheckpointName(cur.Parent)), cur.Parent)
				if err != nil {
					break
				}
				cur = p
			}
			continue
		case cerr != nil && kept == 0:
			continue // newer than every complete checkpoint
		}
		if err := removeCheckpoint(fsys, dir, e.name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.name)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("checkpoint: prune %s: %w", dir, errors.Join(errs...))
	}
	return removed, nil
}

// removeCheckpoint deletes dir/name: the manifest first, then the rest.
func removeCheckpoint(fsys vfs.FS, dir, name string) error {
	cdir := filepath.Join(dir, name)
	manifest := filepath.Join(cdir, ManifestName)
	if _, err := fsys.Stat(manifest); err == nil {
		if err := fsys.Remove(manifest); err != nil {
			return err
		}
		if err := fsys.SyncDir(cdir); err != nil {
			return err
		}
	}
	des, err := fsys.ReadDir(cdir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := fsys.Remove(filepath.Join(cdir, de.Name())); err != nil {
			return err
		}
	}
	if err := fsys.Remove(cdir); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// fileError explains a failure to open or stat a checkpoint file: "missing"
// when it does not exist (errors.Is still finds fs.ErrNotExist).
func fileError(name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errorf(fs.ErrNotExist, "%s: missing", name)
	}
	return fmt.Errorf("%s: %w", name, err)
}
