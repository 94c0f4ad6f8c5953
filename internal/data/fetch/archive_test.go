package fetch_test

import (
	"archive/zip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/fetch"
	"github.com/paramserv/paramserv/internal/testutil"
)

// mlZip writes ml-100k.zip into a new folder, laid out as GroupLens
// publishes it (every file under ml-100k/), from the shared copies;
// corrupt names a member written with one byte flipped.
func mlZip(t *testing.T, corrupt string) string {
	t.Helper()
	root := testutil.DataDir(t, "ml-100k")
	files, err := fetch.Files("ml-100k")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "ml-100k.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(out)
	for _, f := range append(files, fetch.File{Name: "mku.sh"}) {
		b, err := os.ReadFile(filepath.Join(root, "ml-100k", f.Name))
		if f.Name == "mku.sh" { // in the real archive, not kept
			b, err = []byte("#!/bin/sh\n"), nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Name == corrupt {
			b[len(b)/2] ^= 0x40
		}
		// Stored, not deflated as GroupLens' are, but for the README:
		// deflating 15 MB under -race takes a minute.
		method := zip.Store
		if f.Name == "README" {
			method = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "ml-100k/" + f.Name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return dir
}

func TestFetchArchive(t *testing.T) {
	root := testutil.DataDir(t, "ml-100k")
	srv, requests := mirror(t, mlZip(t, ""))
	dir := t.TempDir()
	if err := fetch.Fetch(context.Background(), "ml-100k", dir, []string{srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	files, _ := fetch.Files("ml-100k")
	var names []string
	for _, f := range files {
		sameFile(t, filepath.Join(dir, "ml-100k", f.Name), filepath.Join(root, "ml-100k", f.Name))
		names = append(names, f.Name)
	}
	if extra := leftovers(t, filepath.Join(dir, "ml-100k"), names...); extra != nil {
		t.Errorf("left behind: %v (the archive and temporary files must go)", extra)
	}
	// Everything present and valid: nothing is downloaded again.
	n := requests.Load()
	if err := fetch.Fetch(context.Background(), "ml-100k", dir, []string{srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if requests.Load() != n {
		t.Errorf("a second fetch downloaded again")
	}
}

func TestFetchArchiveCorruptMember(t *testing.T) {
	srv, _ := mirror(t, mlZip(t, "u1.test"))
	dir := t.TempDir()
	err := fetch.Fetch(context.Background(), "ml-100k", dir, []string{srv.URL + "/"})
	if !errors.Is(err, fetch.ErrChecksum) || !strings.Contains(err.Error(), "u1.test") {
		t.Fatalf("err = %v, want ErrChecksum naming u1.test", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ml-100k", "u1.test")); err == nil {
		t.Errorf("the damaged u1.test was kept")
	}
}

func TestFetchArchiveOffline(t *testing.T) {
	dir := t.TempDir()
	err := fetch.Fetch(context.Background(), "ml-100k", dir, []string{closedAddr(t)})
	if !errors.Is(err, fetch.ErrOffline) {
		t.Fatalf("err = %v, want ErrOffline", err)
	}
	for _, want := range []string{"https://files.grouplens.org/datasets/movielens/ml-100k.zip", "unzip", "--data_dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if extra := leftovers(t, filepath.Join(dir, "ml-100k")); extra != nil {
		t.Errorf("left behind: %v", extra)
	}
}
