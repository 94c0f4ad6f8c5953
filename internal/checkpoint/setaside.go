package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paramserv/paramserv/internal/vfs"
)

// A damaged checkpoint is set aside by renaming its directory
//
//	ckpt-<step>  →  ckpt-<step>.set-aside-<UTC time as 20060102T150405Z>
//
// and writing the reason into a file ReasonName inside it. A set-aside
// directory is no longer a checkpoint: Latest, Load and Prune do not see it
// (Prune never deletes it: it is left for a person to look at, and does not
// count among the kept checkpoints), List reports it as "set aside", and a
// new save at the same step starts from an empty ckpt-<step>.
const (
	setAsideInfix = ".set-aside-"
	// ReasonName is the file inside a set-aside directory that says why.
	ReasonName = "REASON"
	// setAsideTime is the layout of the time in a set-aside name.
	setAsideTime = "20060102T150405Z"
)

// now is the clock of set-aside names; tests replace it.
var now = time.Now

// ErrSetAside is the kind of a List entry for a set-aside directory.
var ErrSetAside = errors.New("checkpoint: set aside")

// SetAsideName is the name a checkpoint at step set aside at t gets.
func SetAsideName(step int64, t time.Time) string {
	return CheckpointName(step) + setAsideInfix + t.UTC().Format(setAsideTime)
}

// parseSetAsideName returns the step of a set-aside directory's name:
// "ckpt-<step>.set-aside-<time>", optionally followed by ".<n>".
func parseSetAsideName(name string) (int64, bool) {
	ck, stamp, ok := strings.Cut(name, setAsideInfix)
	if !ok {
		return 0, false
	}
	step, ok := parseCheckpointName(ck)
	if !ok {
		return 0, false
	}
	stamp, _, _ = strings.Cut(stamp, ".")
	if _, err := time.Parse(setAsideTime, stamp); err != nil {
		return 0, false
	}
	return step, true
}

// damaged reports whether err, a reason from check, says the checkpoint
// itself is bad for good, as opposed to unfinished (no manifest) or
// unreadable for a cause that may pass (an I/O error, a permission).
func damaged(err error) bool {
	if errors.Is(err, ErrIncomplete) {
		return false
	}
	for _, kind := range []error{ErrChain, ErrChecksum, ErrSize, ErrFormat, ErrMismatch, ErrVersion, fs.ErrNotExist} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

// LatestSetAside is Latest for a restore: it returns the same manifest and
// skipped list, and besides sets aside each damaged checkpoint it passed
// over (see SetAsideName), so that the job, going on from an older
// checkpoint, can save again at the damaged one's step. Skipped.SetAside
// names where each went. Checkpoints without a manifest (unfinished saves,
// which the writers replace) and ones unreadable for a cause that may pass
// (an I/O error, a permission) are left in place.
//
// Several servers may call it at once on the same directory: the rename is
// atomic, and a caller that finds the directory already gone treats it as
// set aside by another (Skipped.SetAside is then empty, SetAsideErr nil). A
// failure to set aside is reported in Skipped.SetAsideErr and does not fail
// the call.
func LatestSetAside(fsys vfs.FS, dir string) (m Manifest, skipped []Skipped, err error) {
	return Verifier{}.LatestSetAside(fsys, dir)
}

// LatestSetAside is the package's LatestSetAside, verified as v says.
func (v Verifier) LatestSetAside(fsys vfs.FS, dir string) (m Manifest, skipped []Skipped, err error) {
	m, skipped, err = v.Latest(fsys, dir)
	for i := range skipped {
		if damaged(skipped[i].Err) {
			skipped[i].SetAside, skipped[i].SetAsideErr = setAside(fsys, dir, skipped[i])
		}
	}
	return m, skipped, err
}

// setAside renames dir/<s.Name> away and writes its REASON. It returns the
// new name, or "" if the directory was already gone.
func setAside(fsys vfs.FS, dir string, s Skipped) (string, error) {
	from := filepath.Join(dir, s.Name)
	// A directory without a manifest is not the damaged checkpoint that
	// was checked: it was set aside and a new save has begun since.
	if _, err := fsys.Stat(filepath.Join(from, ManifestName)); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	t := now()
	base := SetAsideName(s.Step, t)
	name := base
	for i := 1; ; i++ {
		err := fsys.Rename(from, filepath.Join(dir, name))
		if err == nil {
			break
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", nil // another server set it aside first
		case (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist)) && i < 100:
			name = base + "." + strconv.Itoa(i) // that name is taken
			continue
		}
		return "", fmt.Errorf("checkpoint: setting aside %s: %w", from, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return name, fmt.Errorf("checkpoint: setting aside %s as %s: %w", from, name, err)
	}
	host, _ := os.Hostname()
	text := fmt.Sprintf("%s\n%s set aside at %s by pid %d on %s\n", status(s.Err), s.Name, t.UTC().Format(time.RFC3339), os.Getpid(), host)
	err := writeAtomic(fsys, filepath.Join(dir, name), ReasonName, func(w io.Writer) error {
		_, err := io.WriteString(w, text)
		return err
	})
	return name, err
}

// readReason returns the first line of a set-aside directory's REASON
// ("damaged: why"; at most 4 KiB of it).
func readReason(fsys vfs.FS, sdir string) (string, error) {
	f, err := fsys.Open(filepath.Join(sdir, ReasonName))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}
