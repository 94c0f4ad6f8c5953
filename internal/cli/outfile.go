package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkOutFile makes sure, before any work, that path can be written as
// the output of --flag. Every output is written to a temporary file beside
// it and renamed over it, so path must not be a directory or a device, a
// pipe or another file that is not a regular one (the rename would replace
// /dev/null itself, not write into it), and its directory must exist and
// take new files. Errors name the flag and say what was expected.
func checkOutFile(flag, path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("--%s=%s: is a directory, want a file name", flag, path)
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("--%s=%s: is a %s, not a regular file: the output is written beside it and renamed over it; want a file name", flag, path, fileKind(fi.Mode()))
	}
	dir := filepath.Dir(path)
	fi, err = os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("--%s=%s: its directory %s: %v", flag, path, dir, errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("--%s=%s: %s is not a directory", flag, path, dir)
	}
	tmp, err := os.CreateTemp(dir, ".paramserv-write-probe-*")
	if err != nil {
		return fmt.Errorf("--%s=%s: cannot write in %s: %v", flag, path, dir, errors.Unwrap(err))
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return strings.TrimSpace("special file " + m.Type().String())
}

// outsideCheckpoints refuses an output path inside one checkpoint of dir
// (dir/ckpt-N/..., set-aside ones included): writing there would replace
// or add to the files a checkpoint is made of, the very ones being read.
// An output beside the checkpoints (dir/model.safetensors) is fine.
func outsideCheckpoints(flag, path, dir string) error {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return filepath.Clean(p)
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r
		}
		return a
	}
	// The output's directory, with links resolved, and its name: the file
	// itself may not exist yet.
	out := filepath.Join(abs(filepath.Dir(path)), filepath.Base(path))
	rel, err := filepath.Rel(abs(dir), out)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil
	}
	first, rest, _ := strings.Cut(rel, string(filepath.Separator))
	if rest == "" || !strings.HasPrefix(first, "ckpt-") {
		return nil
	}
	return fmt.Errorf("--%s=%s: is inside the checkpoint %s of %s, which it would damage; write it outside %s/ckpt-*", flag, path, first, dir, filepath.Clean(dir))
}
