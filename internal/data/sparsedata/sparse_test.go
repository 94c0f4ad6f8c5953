package sparsedata

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func readLines(t *testing.T, input string, cfg LineConfig) []string {
	t.Helper()
	lr, err := NewLineReader(strings.NewReader(input), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		line, n, err := lr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			out = append(out, fmt.Sprintf("%d!%v", n, err))
			continue
		}
		out = append(out, fmt.Sprintf("%d:%s", n, line))
	}
}

func TestLineReader(t *testing.T) {
	for _, c := range []struct {
		input string
		cfg   LineConfig
		want  []string
	}{
		{"", LineConfig{}, nil},
		{"\n", LineConfig{}, []string{"1:"}},
		{"a\r\nb\n\nc", LineConfig{}, []string{"1:a", "2:b", "3:", "4:c"}},
		{"a\r\r\n", LineConfig{}, []string{"1:a\r"}},
		// The limit counts the line without its terminator.
		{"1234\n12345\n123\r\n", LineConfig{Name: "f", MaxLineBytes: 4}, []string{"1:1234", "2!f:2: line longer than 4 bytes", "3:123"}},
		{"12345678901234567890\nok\n" + strings.Repeat("x", 100), LineConfig{Name: "f", MaxLineBytes: 4},
			[]string{"1!f:1: line longer than 4 bytes", "2:ok", "3!f:3: line longer than 4 bytes"}},
		{"a\nb\nc\nd\ne", LineConfig{Partition: Partition{Worker: 1, NumWorkers: 2}}, []string{"2:b", "4:d"}},
		// FirstIndex continues the numbering of earlier files.
		{"a\nb\nc\nd\ne", LineConfig{Partition: Partition{Worker: 1, NumWorkers: 2}, FirstIndex: 3}, []string{"1:a", "3:c", "5:e"}},
		// Over-long lines of other workers are not this worker's errors.
		{"aaaaaaaa\nb\n", LineConfig{MaxLineBytes: 4, Partition: Partition{Worker: 1, NumWorkers: 2}}, []string{"2:b"}},
	} {
		if got := readLines(t, c.input, c.cfg); !slices.Equal(got, c.want) {
			t.Errorf("lines of %q with %+v = %q, want %q", c.input, c.cfg, got, c.want)
		}
	}
}

func TestLineReaderTooLongIsParseError(t *testing.T) {
	lr, _ := NewLineReader(strings.NewReader(strings.Repeat("x", 40)), LineConfig{Name: "big", MaxLineBytes: 16})
	_, _, err := lr.Next()
	var pe *ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrLineTooLong) || pe.File != "big" || pe.Line != 1 {
		t.Errorf("Next = %v, want a ParseError for big:1 wrapping ErrLineTooLong", err)
	}
	if _, _, err := lr.Next(); err != io.EOF {
		t.Errorf("after the long line: %v, want io.EOF", err)
	}
	if lr.Lines() != 1 {
		t.Errorf("Lines = %d, want 1", lr.Lines())
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestLineReaderReadError(t *testing.T) {
	lr, _ := NewLineReader(failingReader{}, LineConfig{Name: "f"})
	if _, _, err := lr.Next(); err == nil || !strings.Contains(err.Error(), "reading f after line 0: disk on fire") {
		t.Errorf("Next = %v", err)
	}
}

func TestPartition(t *testing.T) {
	for _, p := range []Partition{{}, {0, 1}, {2, 3}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range []Partition{{1, 0}, {3, 3}, {-1, 2}, {0, -1}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: valid", p)
		}
	}
	// Every index belongs to exactly one worker.
	for i := range int64(100) {
		owners := 0
		for w := range 7 {
			if (Partition{w, 7}).Owns(i) {
				owners++
			}
		}
		if owners != 1 {
			t.Fatalf("line %d has %d owners", i, owners)
		}
	}
}

func TestParseErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    *ParseError
		want string
	}{
		{&ParseError{File: "a9a", Line: 17, Token: "3:x", Msg: "value is not a number"}, `a9a:17: token "3:x": value is not a number`},
		{&ParseError{File: "a9a", Line: 2, Msg: "line longer than 4 bytes"}, `a9a:2: line longer than 4 bytes`},
		{&ParseError{Token: "\x00", Msg: "bad"}, `token "\x00": bad`},
		{NewParseError(ErrSyntax, []byte(strings.Repeat("y", 70)), "%s", "long"), `token "` + strings.Repeat("y", 64) + `...": long`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestDataset(t *testing.T) {
	var d Dataset
	if _, ok := d.MaxKey(); ok || d.Len() != 0 {
		t.Error("empty Dataset has keys")
	}
	a := Example{Label: 1, Keys: []uint64{3, 9}, Vals: []float32{1, 2}}
	b := Example{Label: 0}
	c := Example{Label: 1, Keys: []uint64{4}, Vals: []float32{5}}
	for _, ex := range []*Example{&a, &b, &c} {
		d.Append(ex)
	}
	a.Keys[0] = 100 // Append copied
	if d.Len() != 3 || d.NNZ() != 3 || !slices.Equal(d.Offsets, []int{0, 2, 2, 3}) {
		t.Fatalf("Dataset %+v", d)
	}
	if mk, _ := d.MaxKey(); mk != 9 {
		t.Errorf("MaxKey = %d, want 9", mk)
	}
	got := d.At(0)
	if got.Label != 1 || !slices.Equal(got.Keys, []uint64{3, 9}) || !slices.Equal(got.Vals, []float32{1, 2}) {
		t.Errorf("At(0) = %+v", got)
	}
	got.Keys = append(got.Keys, 77) // capacity-limited: must not overwrite example 2
	if d.At(2).Keys[0] != 4 {
		t.Error("appending to At(0).Keys overwrote At(2)")
	}
	cl := got.Clone()
	cl.Keys[0] = 55
	if got.Keys[0] != 3 {
		t.Error("Clone shares memory")
	}
}
