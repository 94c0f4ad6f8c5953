package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWithin is failure 11 of issue 12 (the checkpoint package's part): a
// Checkpoint or Restore request may name only the ps's own checkpoint
// directory or a directory inside it.
func TestWithin(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "ckpt")
	other := filepath.Join(base, "other")
	for _, d := range []string{root, other, filepath.Join(root, "sub"), filepath.Join(base, "ckpt-evil")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	link(other, filepath.Join(root, "out"))                     // absolute link out
	link("../other", filepath.Join(root, "relout"))             // relative link out
	link(filepath.Join(root, "sub"), filepath.Join(root, "in")) // link that stays in
	link(filepath.Join(root, "sub"), filepath.Join(base, "alias"))
	link("loop2", filepath.Join(root, "loop1"))
	link("loop1", filepath.Join(root, "loop2"))
	// A link to a directory two levels down: ".." after it goes up from
	// the target (ckpt/sub/deep/.. is ckpt/sub), not lexically.
	if err := os.MkdirAll(filepath.Join(other, "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	link(filepath.Join(other, "deep"), filepath.Join(root, "deeplink"))

	ok := map[string]string{
		root:                                   root,
		root + "/":                             root,
		root + "/./sub/..":                     root,
		filepath.Join(root, "sub"):             filepath.Join(root, "sub"),
		filepath.Join(root, "new", "deeper"):   filepath.Join(root, "new", "deeper"),
		filepath.Join(root, "in"):              filepath.Join(root, "in"),
		filepath.Join(base, "alias"):           filepath.Join(base, "alias"), // a link into root
		filepath.Join(root, "in", "..", "sub"): filepath.Join(root, "sub"),
	}
	for dir, want := range ok {
		got, err := Within(root, dir)
		if err != nil || got != want {
			t.Errorf("Within(%q) = %q, %v; want %q", dir, got, err, want)
		}
	}
	bad := []string{
		base,
		other,
		"/etc",
		"/",
		filepath.Join(root, ".."),
		filepath.Join(root, "..", "other"),
		filepath.Join(root, "sub", "..", "..", "other"),
		filepath.Join(base, "ckpt-evil"), // shares root's prefix
		root + "-evil",
		filepath.Join(root, "out"),
		filepath.Join(root, "out", "ckpt-5"),
		filepath.Join(root, "relout"),
		root + "/deeplink/..",  // other, through the link
		root + "/out/../other", // lexically root/other, on disk base/other
		filepath.Join(root, "loop1"),
	}
	for _, dir := range bad {
		got, err := Within(root, dir)
		if !errors.Is(err, ErrOutside) {
			t.Errorf("Within(%q) = %q, %v; want ErrOutside", dir, got, err)
		}
	}
	_, err := Within(root, other)
	if want := `checkpoint: "` + other + `" is outside the ps's --checkpoint_dir "` + root + `"`; err == nil || err.Error() != want {
		t.Errorf("error %v\nwant %s", err, want)
	}
	if _, err := Within("", root); !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "no --checkpoint_dir") {
		t.Errorf("Within with no root: %v", err)
	}
	if _, err := Within(root, ""); !errors.Is(err, ErrOutside) {
		t.Errorf("Within of an empty dir: %v", err)
	}

	// Relative names resolve from the working directory, root's too.
	t.Chdir(base)
	if got, err := Within("ckpt", "ckpt/./sub"); err != nil || got != "ckpt/sub" {
		t.Errorf("relative: %q, %v", got, err)
	}
	if got, err := Within("ckpt", root); err != nil || got != root {
		t.Errorf("relative root, absolute dir: %q, %v", got, err)
	}
	for _, dir := range []string{"other", "ckpt/../other", "ckpt/out", "../" + filepath.Base(base) + "/other"} {
		if _, err := Within("ckpt", dir); !errors.Is(err, ErrOutside) {
			t.Errorf("Within(ckpt, %q) = %v; want ErrOutside", dir, err)
		}
	}
	// A root that does not exist yet (the first save creates it).
	if got, err := Within("ckpt/none/yet", "ckpt/none/yet"); err != nil || got != "ckpt/none/yet" {
		t.Errorf("missing root: %q, %v", got, err)
	}
}
