package sparsedata

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/progress"
)

// wordSource reads lines "label key key ..." (every value 1).
type wordSource struct {
	sc *bufio.Scanner
	ex Example
	st Stats
}

func (s *wordSource) Next() (*Example, error) {
	if !s.sc.Scan() {
		if err := s.sc.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	s.ex.Reset()
	f := strings.Fields(s.sc.Text())
	l, _ := strconv.ParseFloat(f[0], 32)
	s.ex.Label = float32(l)
	for _, w := range f[1:] {
		k, _ := strconv.ParseUint(w, 10, 64)
		s.ex.Keys = append(s.ex.Keys, k)
		s.ex.Vals = append(s.ex.Vals, 1)
	}
	s.st.Lines++
	s.st.Examples++
	return &s.ex, nil
}

func (s *wordSource) Stats() Stats { return s.st }

// Loading grows the data set's slices to what the whole input needs,
// estimated from the first megabyte, not by append's steps: a few copies in
// all, and little capacity beyond the data. (Append's steps left a worker
// holding 2.9× its data's CSR size.)
func TestLoadGrowsToTheEstimate(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	rows := 0
	for f := range 3 {
		var b strings.Builder
		for b.Len() < 3<<19 {
			fmt.Fprintf(&b, "%d", rows%2)
			for j := range 20 + rows%13 {
				fmt.Fprintf(&b, " %d", (rows*31+j*7)%100000)
			}
			b.WriteByte('\n')
			rows++
		}
		p := filepath.Join(dir, fmt.Sprintf("part-%d", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	g := &grower{d: &Dataset{}}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		g.total += fi.Size()
	}
	open := func(r io.Reader, name string, first int64) (Source, error) {
		return &wordSource{sc: bufio.NewScanner(r)}, nil
	}
	m := &progress.Meter{} // as a worker loads: the meter counts bytes too
	for _, p := range paths {
		if _, err := loadFile(g, p, 0, open, m); err != nil {
			t.Fatal(err)
		}
	}
	d := g.d
	if d.Len() != rows {
		t.Fatalf("%d rows loaded, want %d", d.Len(), rows)
	}
	// Append's steps take about ten from lateKeys keys to here.
	if d.NNZ() < 2*lateKeys {
		t.Fatalf("%d keys: too few to count grows", d.NNZ())
	}
	if g.grows > 3 {
		t.Errorf("the slices were grown %d times past %d keys", g.grows, lateKeys)
	}
	for _, c := range []struct {
		name     string
		len, cap int
	}{{"Keys", len(d.Keys), cap(d.Keys)}, {"Labels", len(d.Labels), cap(d.Labels)}} {
		if float64(c.cap) > 1.15*float64(c.len) {
			t.Errorf("%s: capacity %d for %d entries", c.name, c.cap, c.len)
		}
	}
	// The same data as LoadFiles reads it.
	d2, _, err := LoadFiles(paths, open)
	if err != nil {
		t.Fatal(err)
	}
	if d2.NNZ() != d.NNZ() || d2.At(rows - 1).Keys[0] != d.At(rows - 1).Keys[0] {
		t.Error("LoadFiles read other data")
	}
}
