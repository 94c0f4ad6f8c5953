package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutside: a request named a checkpoint directory outside the one the
// server was given.
var ErrOutside = errors.New("checkpoint: outside the checkpoint directory")

// Within confines a directory named in a request (a Checkpoint or Restore
// sent to a ps) to the server's own checkpoint directory root. It returns
// filepath.Clean(dir) when dir is root itself or lies inside it, and an
// error wrapping ErrOutside otherwise, or when root is empty (the server
// has no checkpoint directory, so it takes no such request).
//
// "Inside" is decided on the real disk, not only on the names: relative
// names are taken from the working directory, and the symbolic links of
// the part of each path that exists are followed (".." after a link goes
// up from the link's target, as the kernel does), so neither "..", an
// absolute path elsewhere, a link pointing out, nor a sibling sharing a
// prefix ("/ckpt-evil" for "/ckpt") gets through. The check and the later
// use are not atomic: whoever can create links inside root between them
// can still redirect the write, which is the server operator's own trust.
func Within(root, dir string) (string, error) {
	if root == "" {
		return "", errorf(ErrOutside, "checkpoint: %q: this ps has no --checkpoint_dir, so it takes no checkpoint or restore request", dir)
	}
	if dir == "" {
		return "", errorf(ErrOutside, "checkpoint: no directory named; want the ps's --checkpoint_dir %q", root)
	}
	clean := filepath.Clean(dir)
	r, err := resolve(root)
	if err != nil {
		return "", errorf(ErrOutside, "checkpoint: the ps's --checkpoint_dir %q: %w", root, err)
	}
	for _, p := range []string{dir, clean} {
		d, err := resolve(p)
		if err != nil {
			return "", errorf(ErrOutside, "checkpoint: %q: %w", dir, err)
		}
		if !inside(r, d) {
			return "", errorf(ErrOutside, "checkpoint: %q is outside the ps's --checkpoint_dir %q", dir, root)
		}
	}
	return clean, nil
}

// inside reports whether the clean absolute path d is root or below it.
func inside(root, d string) bool {
	rel, err := filepath.Rel(root, d)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// maxLinks bounds the symbolic links resolve follows, as the kernel's
// ELOOP limit does.
const maxLinks = 40

// resolve returns the absolute, clean path that p names on disk: the links
// of the part that exists are followed, component by component, and the
// rest, which cannot hold links, is joined lexically.
func resolve(p string) (string, error) {
	// Not filepath.Abs: it cleans, dropping ".." lexically, before the
	// links that precede it are known.
	raw := p
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		raw = wd + string(filepath.Separator) + p
	}
	todo := strings.Split(raw, string(filepath.Separator))
	cur := string(filepath.Separator)
	links := 0
	for i := 0; i < len(todo); i++ {
		c := todo[i]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below exists: no links to follow.
			return filepath.Join(append([]string{next}, todo[i+1:]...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: errors.New("too many levels of symbolic links")}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
		}
		rest := strings.Split(target, string(filepath.Separator))
		todo = append(rest, todo[i+1:]...)
		i = -1
	}
	return cur, nil
}
