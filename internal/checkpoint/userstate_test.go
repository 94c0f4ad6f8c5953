package checkpoint

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/paramserv/paramserv/internal/vfs"
)

func TestUserStateRoundTrip(t *testing.T) {
	forEachFS(t, testUserStateRoundTrip)
}

func testUserStateRoundTrip(t *testing.T, m vfs.FS, dir string) {
	if err := m.MkdirAll(filepath.Join(dir, CheckpointName(7)), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUserState(m, dir, 7); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no state: got %v, want fs.ErrNotExist", err)
	}
	want := []byte("a pickled dict\x00\xff")
	if err := WriteUserState(m, dir, 7, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadUserState(m, dir, 7)
	if err != nil || string(got) != string(want) {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
	// A flipped byte is found.
	path := filepath.Join(dir, CheckpointName(7), UserStateName)
	b := readAll(t, m, path)
	b[len(b)-1] ^= 1
	overwrite(t, m, path, b)
	if _, err := ReadUserState(m, dir, 7); !errors.Is(err, ErrFormat) {
		t.Fatalf("damaged: got %v, want ErrFormat", err)
	}
	overwrite(t, m, path, b[:10])
	if _, err := ReadUserState(m, dir, 7); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated: got %v, want ErrFormat", err)
	}
}
