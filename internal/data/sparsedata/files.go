package sparsedata

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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
	if m != nil {
		m.Total = 0
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil {
				m.Total += fi.Size()
			}
		}
		m.Start()
	}
	for _, p := range paths {
		st, err := loadFile(d, p, total.Lines, open, m)
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

func loadFile(d *Dataset, path string, firstIndex int64, open Opener, m *progress.Meter) (Stats, error) {
	f, r, err := openFileMeter(path, m)
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
		d.Append(ex)
		if m != nil {
			m.AddRows(1)
		}
	}
}

// openFile opens path for reading, through gzip when its name ends in
// ".gz". Closing the returned closer closes both.
func openFile(path string) (io.Closer, io.Reader, error) { return openFileMeter(path, nil) }

// openFileMeter is openFile counting the file's bytes into m (if not nil)
// as they are read.
func openFileMeter(path string, m *progress.Meter) (io.Closer, io.Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	var raw io.Reader = f
	if m != nil {
		raw = m.Reader(f)
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
