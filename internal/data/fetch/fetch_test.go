package fetch_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/data/fetch"
	"github.com/paramserv/paramserv/internal/testutil"
)

// mirror serves the files of dir, counting requests; corrupt names files
// served with one byte flipped.
func mirror(t *testing.T, dir string, corrupt ...string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		name := strings.TrimPrefix(r.URL.Path, "/")
		for _, c := range corrupt {
			if c == name {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				b[len(b)/2] ^= 0x40
				w.Write(b)
				return
			}
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s differs from %s", a, b)
	}
}

// leftovers lists the files in dir other than want.
func leftovers(t *testing.T, dir string, want ...string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil // a failed fetch takes back the folder it created
	} else if err != nil {
		t.Fatal(err)
	}
	var extra []string
	for _, e := range entries {
		found := false
		for _, w := range want {
			found = found || e.Name() == w
		}
		if !found {
			extra = append(extra, e.Name())
		}
	}
	return extra
}

func TestFetch(t *testing.T) {
	src := filepath.Join(testutil.DataDir(t, "mnist"), "mnist")
	srv, requests := mirror(t, src)
	dir := t.TempDir()
	var logs []string
	f := &fetch.Fetcher{Logf: func(format string, args ...any) { logs = append(logs, format) }}

	// A dead mirror first: the next one serves.
	dead := closedAddr(t)
	if err := f.Fetch(context.Background(), "mnist", dir, []string{dead, srv.URL}); err != nil {
		t.Fatal(err)
	}
	files, _ := fetch.Files("mnist")
	var names []string
	for _, file := range files {
		sameFile(t, filepath.Join(dir, "mnist", file.Name), filepath.Join(src, file.Name))
		names = append(names, file.Name)
	}
	if extra := leftovers(t, filepath.Join(dir, "mnist"), names...); extra != nil {
		t.Errorf("left behind: %v", extra)
	}
	if got := requests.Load(); got != 4 {
		t.Errorf("%d requests, want 4", got)
	}
	if len(logs) == 0 {
		t.Error("nothing logged")
	}

	// Everything present and valid: no request at all.
	requests.Store(0)
	if err := fetch.Fetch(context.Background(), "mnist", dir, []string{srv.URL}); err != nil {
		t.Fatal(err)
	}
	if got := requests.Load(); got != 0 {
		t.Errorf("second fetch made %d requests, want 0", got)
	}

	// A damaged file is downloaded again, the others are not.
	damaged := filepath.Join(dir, "mnist", "t10k-labels-idx1-ubyte.gz")
	if err := os.WriteFile(damaged, []byte("oops"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fetch.Fetch(context.Background(), "mnist", dir, []string{srv.URL}); err != nil {
		t.Fatal(err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("repair made %d requests, want 1", got)
	}
	sameFile(t, damaged, filepath.Join(src, "t10k-labels-idx1-ubyte.gz"))
}

func TestFetchCorrupt(t *testing.T) {
	src := filepath.Join(testutil.DataDir(t, "mnist"), "mnist")
	const bad = "train-labels-idx1-ubyte.gz"
	srv, _ := mirror(t, src, bad)
	dir := t.TempDir()
	err := fetch.Fetch(context.Background(), "mnist", dir, []string{srv.URL})
	if !errors.Is(err, fetch.ErrChecksum) {
		t.Fatalf("err = %v, want ErrChecksum", err)
	}
	for _, want := range []string{bad, "want sha256 3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", "got "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// The file before it was saved; the corrupt one and its temp file are gone.
	if extra := leftovers(t, filepath.Join(dir, "mnist"), "train-images-idx3-ubyte.gz"); extra != nil {
		t.Errorf("left behind: %v", extra)
	}
}

func TestFetchTooLong(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 10_000_000)) // the first file has 9,912,422
	}))
	defer srv.Close()
	dir := t.TempDir()
	err := fetch.Fetch(context.Background(), "mnist", dir, []string{srv.URL})
	if !errors.Is(err, fetch.ErrChecksum) || !strings.Contains(err.Error(), "more than 9912422 bytes") {
		t.Fatalf("err = %v, want ErrChecksum saying the file was too long", err)
	}
}

func TestFetchHTTPError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	err := fetch.Fetch(context.Background(), "fashion-mnist", t.TempDir(), []string{srv.URL + "/x/"})
	if err == nil || !strings.Contains(err.Error(), "404 Not Found") || !strings.Contains(err.Error(), srv.URL+"/x/train-images-idx3-ubyte.gz") {
		t.Fatalf("err = %v, want a 404 naming the URL", err)
	}
	if errors.Is(err, fetch.ErrOffline) {
		t.Error("a 404 is not being offline")
	}
}

// closedAddr returns the URL of a port nobody listens on while the test
// runs.
func closedAddr(t *testing.T) string {
	return "http://" + testutil.RefusedAddr(t) + "/"
}

func TestFetchOffline(t *testing.T) {
	dir := t.TempDir()
	err := fetch.Fetch(context.Background(), "mnist", dir, []string{closedAddr(t), closedAddr(t)})
	if !errors.Is(err, fetch.ErrOffline) {
		t.Fatalf("err = %v, want ErrOffline", err)
	}
	for _, want := range []string{"offline", "--data_dir", "train-images-idx3-ubyte.gz", "storage.googleapis.com"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if extra := leftovers(t, filepath.Join(dir, "mnist")); extra != nil {
		t.Errorf("left behind: %v", extra)
	}
	if _, err := os.Stat(filepath.Join(dir, "mnist")); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left the folder it created: %v", err)
	}
}

// A fetch into a folder that does not exist yet creates none of it when it
// fails, and keeps a folder that was there before.
func TestFetchFailedCreatesNothing(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "new", "data")
	if err := fetch.Fetch(context.Background(), "a9a", dir, []string{closedAddr(t)}); err == nil {
		t.Fatal("fetch from a closed port succeeded")
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left %s/new behind: %v", base, err)
	}
	kept := filepath.Join(base, "kept")
	if err := os.Mkdir(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fetch.Fetch(context.Background(), "a9a", kept, []string{closedAddr(t)}); err == nil {
		t.Fatal("fetch from a closed port succeeded")
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a failed fetch removed the folder it was given: %v", err)
	}
	if _, err := os.Stat(filepath.Join(kept, "a9a")); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left kept/a9a behind: %v", err)
	}
}

func TestFetchStalled(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("\x1f\x8b"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	dir := t.TempDir()
	f := &fetch.Fetcher{StallTimeout: 50 * time.Millisecond}
	err := f.Fetch(context.Background(), "mnist", dir, []string{srv.URL})
	if !errors.Is(err, fetch.ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", err)
	}
	if extra := leftovers(t, filepath.Join(dir, "mnist")); extra != nil {
		t.Errorf("left behind: %v", extra)
	}
}

func TestFetchCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := fetch.Fetch(ctx, "mnist", t.TempDir(), []string{closedAddr(t)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestUnknownDataset(t *testing.T) {
	err := fetch.Fetch(context.Background(), "cifar10", t.TempDir(), nil)
	if !errors.Is(err, fetch.ErrUnknownDataset) || !strings.Contains(err.Error(), "a9a, ap, fashion-mnist, ml-100k, mnist") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("PARAMSERV_DATA", "/somewhere/data")
	if d, err := fetch.DefaultDir(); err != nil || d != "/somewhere/data" {
		t.Errorf("with PARAMSERV_DATA: %q, %v", d, err)
	}
	t.Setenv("PARAMSERV_DATA", "")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skip(err)
	}
	if d, err := fetch.DefaultDir(); err != nil || d != filepath.Join(cache, "paramserv", "data") {
		t.Errorf("without PARAMSERV_DATA: %q, %v", d, err)
	}
}

// TestSumsMatchShared checks the built-in table against the shared data's
// SHA256SUMS, and the shared files' sizes against it.
func TestSumsMatchShared(t *testing.T) {
	root := testutil.DataDir(t, "SHA256SUMS")
	sums, err := os.Open(filepath.Join(root, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer sums.Close()
	shared := map[string]string{}
	sc := bufio.NewScanner(sums)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 {
			shared[f[1]] = f[0]
		}
	}
	for _, ds := range fetch.Datasets() {
		files, _ := fetch.Files(ds)
		for _, f := range files {
			key := ds + "/" + f.Name
			if shared[key] != f.SHA256 {
				t.Errorf("%s: built-in sum %s, SHA256SUMS says %q", key, f.SHA256, shared[key])
			}
			if st, err := os.Stat(filepath.Join(root, key)); err == nil && st.Size() != f.Size {
				t.Errorf("%s: built-in size %d, shared file has %d", key, f.Size, st.Size())
			}
		}
	}
}

// ExampleFetch is compile-only on purpose (no Output line): run, it would
// download MNIST into the user's data directory over the network, which a
// test must not do, and what it prints would depend on what is already
// there. The tests above run Fetch against a local HTTP server instead.
func ExampleFetch() {
	dir, err := fetch.DefaultDir()
	if err != nil {
		return
	}
	// Downloads what dir/mnist lacks; a model then takes --data_dir=dir.
	if err := fetch.Fetch(context.Background(), "mnist", dir, nil); err != nil {
		return
	}
}
