package sparsedata

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/paramserv/paramserv/internal/hugemem"
	"github.com/paramserv/paramserv/internal/progress"
)

// Opener makes a Source over r, named name in errors, whose first line has
// partition index firstIndex (the physical lines of the files before it).
// Packages libsvm and criteo pass their own to LoadFiles.
type Opener func(r io.Reader, name string, firstIndex int64) (Source, error)

// LoadFiles reads the given files in order into one Dataset through open,
// numbering lines for the partition across all of them, so that the parts
// of different workers stay disjoint and balanced even when the files are
// small. A name ending in ".gz" is decompressed. It returns the Stats of
// all files; on error, the examples read so far and the error.
func LoadFiles(paths []string, open Opener) (*Dataset, Stats, error) {
	return LoadFilesMeter(paths, open, nil)
}

// LoadFilesMeter is LoadFiles that reports its progress through m, if not
// nil: the bytes of the files as they come off the disk (before any
// decompression) and this worker's examples as rows, with m.Total the
// files' sizes, and m.Done once every file is read (not after an error).
func LoadFilesMeter(paths []string, open Opener, m *progress.Meter) (*Dataset, Stats, error) {
	d := &Dataset{}
	var total Stats
	g := &grower{d: d}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			g.total += fi.Size()
		}
	}
	if m != nil {
		m.Total = g.total
		m.Start()
	}
	for _, p := range paths {
		st, err := loadFile(g, p, total.Lines, open, m)
		total = total.Add(st)
		if err != nil {
			return d, total, err
		}
	}
	if m != nil {
		m.Done()
	}
	return d, total, nil
}

func loadFile(g *grower, path string, firstIndex int64, open Opener, m *progress.Meter) (Stats, error) {
	f, r, err := openFileMeter(path, &g.read, m)
	if err != nil {
		return Stats{}, err
	}
	defer f.Close()
	src, err := open(r, path, firstIndex)
	if err != nil {
		return Stats{}, err
	}
	for {
		ex, err := src.Next()
		if err == io.EOF {
			return src.Stats(), nil
		}
		if err != nil {
			return src.Stats(), err
		}
		g.append(ex)
		if m != nil {
			m.AddRows(1)
		}
	}
}

// grower appends to a Dataset, growing its slices to what the whole input
// will need, estimated from the examples and non-zeros read per byte so
// far, rather than by append's steps. Append's steps (1.25× for large
// slices) leave the old array as garbage at each one, and the collector lets
// the heap grow to twice what is live: a worker that loaded 472 MB of
// Criteo text (a 650 MB CSR) held 1.9 GB. Grown to the estimate (3% over),
// the slices are copied about once, and the capacity never written is
// address space the kernel has not backed with memory.
type grower struct {
	d     *Dataset
	total int64 // bytes of every file (compressed, for .gz)
	read  int64 // bytes read off the files so far
	grows int   // times grown with lateKeys keys or more (for tests)
}

// growAfter is the least input read before the rates are trusted.
const growAfter = 1 << 20

// lateKeys is where tests start counting grows.
const lateKeys = 1 << 18

func (g *grower) append(ex *Example) {
	d := g.d
	if len(d.Labels) == cap(d.Labels) || len(d.Keys)+len(ex.Keys) > cap(d.Keys) {
		g.grow(len(ex.Keys))
	}
	d.Append(ex)
}

// grow makes room for one more example of n non-zeros, and for as many
// more as the rest of the input should hold.
func (g *grower) grow(n int) {
	d := g.d
	rows, nnz := len(d.Labels)+1, len(d.Keys)+n
	if len(d.Keys) >= lateKeys {
		g.grows++
	}
	if read := g.read; read >= growAfter && g.total > read {
		// At least 1/8 more each time, so that an estimate that keeps
		// falling short costs few copies.
		scale := max(float64(g.total)/float64(read)*1.03, 1.125)
		rows = max(rows, int(float64(rows)*scale)+64)
		nnz = max(nnz, int(float64(nnz)*scale)+64*n)
	}
	// On huge pages where the system has them: training reads the
	// examples in shuffled order, a TLB miss an example on small pages;
	// and only what is kept is copied, not a cleared tail.
	d.Labels = hugemem.GrowLazy(d.Labels, rows-len(d.Labels))
	d.Offsets = hugemem.GrowLazy(d.Offsets, rows+1-len(d.Offsets))
	d.Keys = hugemem.GrowLazy(d.Keys, nnz-len(d.Keys))
	d.Vals = hugemem.GrowLazy(d.Vals, nnz-len(d.Vals))
}

// openFile opens path for reading, through gzip when its name ends in
// ".gz". Closing the returned closer closes both.
func openFile(path string) (io.Closer, io.Reader, error) { return openFileMeter(path, nil, nil) }

// openFileMeter is openFile counting the file's bytes into n and m (each
// if not nil) as they are read.
func openFileMeter(path string, n *int64, m *progress.Meter) (io.Closer, io.Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	var raw io.Reader = f
	if n != nil {
		raw = countingReader{raw, n}
	}
	if m != nil {
		raw = m.Reader(raw)
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, raw, nil
	}
	zr, err := gzip.NewReader(raw)
	if err != nil {
		f.Close()
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			err = fmt.Errorf("%w: shorter than a gzip header (a name ending in .gz is read as gzip)", gzip.ErrHeader)
		}
		return nil, nil, fmt.Errorf("sparse: %s: %w", path, err)
	}
	return gzCloser{zr, f}, zr, nil
}

// countingReader adds the bytes read through it to n.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	*c.n += int64(k)
	return k, err
}

type gzCloser struct {
	zr *gzip.Reader
	f  *os.File
}

func (c gzCloser) Close() error {
	err := c.zr.Close()
	if e := c.f.Close(); err == nil {
		err = e
	}
	return err
}
