package libsvm

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
)

// writeRows writes n LIBSVM rows (row i has key i+1 and a second key) to
// path, gzipped when path ends in ".gz".
func writeRows(t *testing.T, path string, first, n int) {
	t.Helper()
	var b strings.Builder
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "%s %d:1 %d:0.5\n", map[bool]string{true: "+1", false: "-1"}[i%3 == 0], i+1, 1000000+i%7)
	}
	var data []byte
	if strings.HasSuffix(path, ".gz") {
		var zb strings.Builder
		zw := gzip.NewWriter(&zb)
		if _, err := zw.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		data = []byte(zb.String())
	} else {
		data = []byte(b.String())
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rowString renders an example so rows can be compared as a multiset.
func rowString(ex *sparsedata.Example) string { return fmt.Sprint(ex.Label, ex.Keys, ex.Vals) }

func drain(t *testing.T, cfg sparsedata.StreamConfig) []string {
	t.Helper()
	s, err := sparsedata.NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	for {
		ex, err := s.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rowString(ex))
	}
}

func wholeFile(t *testing.T, paths []string, opts Options) []string {
	t.Helper()
	d, _, err := ReadFiles(paths, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range d.Len() {
		ex := d.At(i)
		out = append(out, rowString(&ex))
	}
	return out
}

func TestStreamYieldsTheRowsOfTheWholeFileReader(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.svm"), filepath.Join(dir, "b.svm.gz")}
	writeRows(t, paths[0], 0, 1000)
	writeRows(t, paths[1], 1000, 777)
	for _, part := range []sparsedata.Partition{{}, {Worker: 1, NumWorkers: 3}} {
		opts := Options{Partition: part}
		want := wholeFile(t, paths, opts)
		for _, buf := range []int{0, 1, 10, 5000} {
			got := drain(t, sparsedata.StreamConfig{Paths: paths, Open: Opener(opts), Epochs: 1, ShuffleBuffer: buf, Seed: 7, ChunkRows: 64})
			if buf <= 1 {
				if !slices.Equal(got, want) {
					t.Fatalf("partition %+v, buffer %d: the stream's rows are not the files' rows in file order (%d vs %d rows)", part, buf, len(got), len(want))
				}
				continue
			}
			if slices.Equal(got, want) {
				t.Errorf("partition %+v, buffer %d: rows came in file order; want them shuffled", part, buf)
			}
			slices.Sort(got)
			w := slices.Clone(want)
			slices.Sort(w)
			if !slices.Equal(got, w) {
				t.Fatalf("partition %+v, buffer %d: the stream's %d rows are not, as a multiset, the whole-file reader's %d", part, buf, len(got), len(w))
			}
		}
	}
}

func TestStreamEpochs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.svm")
	writeRows(t, path, 0, 100)
	got := drain(t, sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{}), Epochs: 3, ShuffleBuffer: 1})
	want := wholeFile(t, []string{path}, Options{})
	if len(got) != 3*len(want) || !slices.Equal(got[200:], want) {
		t.Fatalf("3 epochs gave %d rows; want the file's %d rows three times in order", len(got), len(want))
	}
	// No end: more rows than the file holds keep coming.
	s, err := sparsedata.NewStream(sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{}), ShuffleBuffer: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 1000 {
		if _, err := s.Next(); err != nil {
			t.Fatalf("row %d of an endless stream: %v", i, err)
		}
	}
}

func TestStreamBadLineNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"bad.svm", "bad.svm.gz"} {
		path := filepath.Join(dir, name)
		writeRows(t, path, 0, 1500)
		// Replace line 1201 with a malformed one.
		d, _, _ := ReadFiles([]string{path}, Options{})
		var b []byte
		for i := range d.Len() {
			ex := d.At(i)
			if i == 1200 {
				b = append(b, "+1 7:x\n"...)
				continue
			}
			b, _ = AppendExample(b, &ex, false)
		}
		if strings.HasSuffix(name, ".gz") {
			var zb strings.Builder
			zw := gzip.NewWriter(&zb)
			zw.Write(b)
			zw.Close()
			b = []byte(zb.String())
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := sparsedata.NewStream(sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{}), ShuffleBuffer: 100, ChunkRows: 64})
		if err != nil {
			t.Fatal(err)
		}
		var perr *sparsedata.ParseError
		for {
			_, err = s.Next()
			if err != nil {
				break
			}
		}
		s.Close()
		if !errors.As(err, &perr) || perr.File != path || perr.Line != 1201 || !strings.Contains(err.Error(), path+":1201:") {
			t.Fatalf("%s: got %v; want a ParseError at %s:1201", name, err, path)
		}
		// With SkipBadLines the stream goes on past it.
		got := drain(t, sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{SkipBadLines: true}), Epochs: 1, ShuffleBuffer: 100})
		if len(got) != 1499 {
			t.Fatalf("%s: skipping the bad line gave %d rows; want 1499", name, len(got))
		}
	}
}

// Every error of the files a stream reads is a *sparsedata.InputError, input
// to fix (paramserv train exits 2 on it, as on the same file found bad at
// load), whose message names the file: a missing one, a malformed line, a
// gzip stream that is damaged or cut short, files with no example.
func TestStreamFileErrorsAreInputErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.svm.gz")
	writeRows(t, good, 0, 2000)
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "missing.svm"), "missing.svm"},
		{"malformed line", write("bad.svm", []byte("+1 1:1\n-1 2:x\n")), "bad.svm:2: token \"2:x\": value is not a number"},
		{"empty", write("empty.svm", nil), "no examples for this worker in " + filepath.Join(dir, "empty.svm")},
		{"not gzip", write("plain.svm.gz", []byte("+1 1:1\n-1 2:1\n")), "plain.svm.gz: gzip: invalid header"},
		{"gzip cut short", write("cut.svm.gz", whole[:len(whole)-6]), "cut.svm.gz after line 2000: unexpected EOF (the compressed data ends early: the file was cut short)"},
		{"gzip shorter than its header", write("tiny.svm.gz", whole[:5]), "tiny.svm.gz: gzip: invalid header: shorter than a gzip header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := sparsedata.NewStream(sparsedata.StreamConfig{Paths: []string{c.path}, Open: Opener(Options{}), Epochs: 1, ShuffleBuffer: 10, ChunkRows: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for err == nil {
				_, err = s.Next()
			}
			var ie *sparsedata.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %T %v; want a *sparsedata.InputError naming %q", err, err, c.want)
			}
		})
	}
}

func TestStreamHoldsBoundedRows(t *testing.T) {
	dir := t.TempDir()
	held := map[int]int64{}
	for _, n := range []int{2000, 20000} {
		path := filepath.Join(dir, fmt.Sprint(n, ".svm"))
		writeRows(t, path, 0, n)
		s, err := sparsedata.NewStream(sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{}), Epochs: 2, ShuffleBuffer: 256, ChunkRows: 64, ReadAhead: 2})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := s.Next(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		held[n] = s.MaxHeld()
		s.Close()
	}
	// The reader may run ahead of the consumer by its chunks in flight or
	// not, as the scheduler has it, so the two counts differ run to run;
	// what must hold is one bound, the buffer and the chunks in flight,
	// whatever the number of rows (loading would hold all 20000).
	const bound = 256 + (2+2)*64
	if held[2000] > bound || held[20000] > bound {
		t.Fatalf("rows held at most: %d for 2000 rows, %d for 20000; want the same bound (≤ %d) for both", held[2000], held[20000], bound)
	}
}

// The shuffle depends on the seed alone, not on how the reader and the
// consumer interleave: the same seed gives the same rows in the same order.
func TestStreamShuffleIsReproducible(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.svm")
	writeRows(t, path, 0, 3000)
	cfg := sparsedata.StreamConfig{Paths: []string{path}, Open: Opener(Options{}), Epochs: 2, ShuffleBuffer: 300, Seed: 3, ChunkRows: 32, ReadAhead: 1}
	a := drain(t, cfg)
	cfg.ChunkRows, cfg.ReadAhead = 1000, 8
	if b := drain(t, cfg); !slices.Equal(a, b) {
		t.Fatal("two streams of the same files and seed gave different orders")
	}
	cfg.Seed = 4
	if c := drain(t, cfg); slices.Equal(a, c) {
		t.Fatal("another seed gave the same order")
	}
}
