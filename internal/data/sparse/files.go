package sparse

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"
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
	d := &Dataset{}
	var total Stats
	for _, p := range paths {
		st, err := loadFile(d, p, total.Lines, open)
		total = total.Add(st)
		if err != nil {
			return d, total, err
		}
	}
	return d, total, nil
}

func loadFile(d *Dataset, path string, firstIndex int64, open Opener) (Stats, error) {
	f, r, err := openFile(path)
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
	}
}

// openFile opens path for reading, through gzip when its name ends in
// ".gz". Closing the returned closer closes both.
func openFile(path string) (io.Closer, io.Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
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
