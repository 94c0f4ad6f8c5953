package libsvm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
	"github.com/paramserv/paramserv/internal/testutil"
)

func TestParseLineGood(t *testing.T) {
	for _, c := range []struct {
		line  string
		opts  Options
		ok    bool
		label float32
		keys  []uint64
		vals  []float32
	}{
		{line: "+1 3:1 11:1 14:1", ok: true, label: 1, keys: []uint64{2, 10, 13}, vals: []float32{1, 1, 1}},
		{line: "-1 5:1 7:0.5 ", ok: true, label: 0, keys: []uint64{4, 6}, vals: []float32{1, 0.5}},
		{line: "1\t1:-2.5e3\t2:0", ok: true, label: 1, keys: []uint64{0, 1}, vals: []float32{-2500, 0}},
		{line: "0 4:1 # trailing comment 5:x", ok: true, label: 0, keys: []uint64{3}, vals: []float32{1}},
		{line: "1.0 qid:7 2:3", ok: true, label: 1, keys: []uint64{1}, vals: []float32{3}},
		{line: "-1", ok: true, label: 0},
		{line: "+1 0:1 5:2", opts: Options{ZeroBased: true}, ok: true, label: 1, keys: []uint64{0, 5}, vals: []float32{1, 2}},
		{line: "+1 123:1", opts: Options{NumFeatures: 123}, ok: true, label: 1, keys: []uint64{122}, vals: []float32{1}},
		{line: "", ok: false},
		{line: "   \t ", ok: false},
		{line: "# only a comment", ok: false},
		{line: "  # indented comment 1:1", ok: false},
	} {
		var ex sparsedata.Example
		ok, err := ParseLine([]byte(c.line), &ex, c.opts)
		if err != nil {
			t.Errorf("ParseLine(%q): %v", c.line, err)
			continue
		}
		if ok != c.ok || ex.Label != c.label || !slices.Equal(ex.Keys, c.keys) || !slices.Equal(ex.Vals, c.vals) {
			t.Errorf("ParseLine(%q) = %v %+v, want %v label %v keys %v vals %v", c.line, ok, ex, c.ok, c.label, c.keys, c.vals)
		}
	}
}

func TestParseLineBad(t *testing.T) {
	for _, c := range []struct {
		line  string
		opts  Options
		token string
		msg   string
		kind  error
	}{
		{"2 1:1", Options{}, "2", "label must be", sparsedata.ErrSyntax},
		{"yes 1:1", Options{}, "yes", "label must be", sparsedata.ErrSyntax},
		{"+1 3:x", Options{}, "3:x", "value is not a number", sparsedata.ErrSyntax},
		{"+1 3:", Options{}, "3:", "missing value", sparsedata.ErrSyntax},
		{"+1 3:nan", Options{}, "3:nan", "not finite", sparsedata.ErrSyntax},
		{"+1 3:inf", Options{}, "3:inf", "not finite", sparsedata.ErrSyntax},
		{"+1 3:1e39", Options{}, "3:1e39", "out of float32 range", sparsedata.ErrSyntax},
		{"+1 3", Options{}, "3", "expected index:value", sparsedata.ErrSyntax},
		{"+1 a:1", Options{}, "a:1", "index is not a non-negative integer", sparsedata.ErrSyntax},
		{"+1 -3:1", Options{}, "-3:1", "index is not a non-negative integer", sparsedata.ErrSyntax},
		{"+1 0:1", Options{}, "0:1", "index 0 in a 1-based file", sparsedata.ErrSyntax},
		{"+1 5:1 3:1", Options{}, "3:1", "index 3 not after the previous index 5", sparsedata.ErrSyntax},
		{"+1 5:1 5:1", Options{}, "5:1", "strictly increasing", sparsedata.ErrSyntax},
		{"+1 124:1", Options{NumFeatures: 123}, "124:1", "index 124 out of range: 123 features (indices 1..123)", sparsedata.ErrKeyRange},
		{"+1 123:1", Options{NumFeatures: 123, ZeroBased: true}, "123:1", "(indices 0..122)", sparsedata.ErrKeyRange},
		{"+1 qid:x 1:1", Options{}, "qid:x", "qid is not", sparsedata.ErrSyntax},
		{"+1 1:1 " + strings.Repeat("9", 100) + ":1", Options{}, strings.Repeat("9", 64) + "...", "index is not", sparsedata.ErrSyntax},
	} {
		var ex sparsedata.Example
		_, err := ParseLine([]byte(c.line), &ex, c.opts)
		var pe *sparsedata.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("ParseLine(%q) = %v, want a *sparsedata.ParseError", c.line, err)
			continue
		}
		if pe.Token != c.token || !strings.Contains(pe.Msg, c.msg) || !errors.Is(err, c.kind) {
			t.Errorf("ParseLine(%q): token %q msg %q kind %v; want token %q, msg containing %q, kind %v",
				c.line, pe.Token, pe.Msg, pe.Err, c.token, c.msg, c.kind)
		}
	}
}

// badFile has malformed lines at 3 (value), 5 (label) and 7 (too long).
const badFile = "+1 1:1 2:1\n" +
	"# comment\n" +
	"-1 1:1 3:x\n" +
	"\n" +
	"5 1:1\n" +
	"-1 2:1\r\n" +
	"+1 1:1 2:1 3:1 4:1 5:1 6:1 7:1 8:1\n" +
	"+1 4:2"

func TestReaderErrorsNameFileAndLine(t *testing.T) {
	r, err := NewReader(strings.NewReader(badFile), "a9a", Options{MaxLineBytes: 24})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ex, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			got = append(got, err.Error())
			continue // a Reader goes on after a ParseError
		}
		got = append(got, fmt.Sprintf("ok %v %v", ex.Label, ex.Keys))
	}
	want := []string{
		"ok 1 [0 1]",
		`a9a:3: token "3:x": value is not a number`,
		`a9a:5: token "5": label must be +1, 1, -1 or 0`,
		"ok 0 [1]",
		"a9a:7: line longer than 24 bytes",
		"ok 1 [3]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := r.Stats(); s != (sparsedata.Stats{Lines: 8, Examples: 3}) {
		t.Errorf("Stats = %+v, want 8 lines, 3 examples", s)
	}
}

func TestSkipBadLines(t *testing.T) {
	var skipped []int64
	opts := Options{MaxLineBytes: 24, SkipBadLines: true, OnSkip: func(pe *sparsedata.ParseError) { skipped = append(skipped, pe.Line) }}
	r, err := NewReader(strings.NewReader(badFile), "bad", opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sparsedata.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 3 || r.Stats() != (sparsedata.Stats{Lines: 8, Examples: 3, Skipped: 3}) {
		t.Errorf("read %d examples, Stats %+v; want 3 examples, 8 lines, 3 skipped", d.Len(), r.Stats())
	}
	if !slices.Equal(skipped, []int64{3, 5, 7}) {
		t.Errorf("OnSkip lines %v, want [3 5 7]", skipped)
	}
}

func TestInvalidPartition(t *testing.T) {
	for _, p := range []sparsedata.Partition{{Worker: 2, NumWorkers: 2}, {Worker: -1, NumWorkers: 2}, {Worker: 1}} {
		if _, err := NewReader(strings.NewReader(""), "x", Options{Partition: p}); err == nil {
			t.Errorf("NewReader with partition %+v: no error", p)
		}
	}
}

// writeFiles writes numbered one-feature lines (key i for line i, with
// blank and comment lines mixed in) split across nFiles files.
func writeFiles(t *testing.T, lines, nFiles int) ([]string, int) {
	dir := t.TempDir()
	var paths []string
	bufs := make([]bytes.Buffer, nFiles)
	examples := 0
	for i := range lines {
		b := &bufs[i*nFiles/lines]
		switch {
		case i%7 == 3:
			b.WriteString("# comment\n")
		case i%11 == 5:
			b.WriteString("\n")
		default:
			fmt.Fprintf(b, "+1 %d:1\n", i+1)
			examples++
		}
	}
	for i := range bufs {
		p := filepath.Join(dir, fmt.Sprintf("part-%d", i))
		if err := os.WriteFile(p, bufs[i].Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths, examples
}

func TestPartitionDisjointAndCovering(t *testing.T) {
	paths, examples := writeFiles(t, 1000, 7)
	for n := 1; n <= 6; n++ {
		seen := map[uint64]int{}
		var total sparsedata.Stats
		sizes := make([]int, n)
		for w := range n {
			d, st, err := ReadFiles(paths, Options{Partition: sparsedata.Partition{Worker: w, NumWorkers: n}})
			if err != nil {
				t.Fatal(err)
			}
			total = total.Add(st)
			sizes[w] = d.Len()
			for _, k := range d.Keys {
				if prev, dup := seen[k]; dup {
					t.Fatalf("n=%d: key %d read by workers %d and %d", n, k, prev, w)
				}
				seen[k] = w
			}
		}
		if len(seen) != examples || total.Examples != int64(examples) {
			t.Errorf("n=%d: workers read %d distinct examples (%d in stats), want %d", n, len(seen), total.Examples, examples)
		}
		// Numbering across files keeps the parts balanced.
		if mn, mx := slices.Min(sizes), slices.Max(sizes); mx-mn > 1000/n/5+2 {
			t.Errorf("n=%d: unbalanced parts %v", n, sizes)
		}
	}
	// ReadPart is worker w's part of one file.
	all, _, err := ReadFile(paths[0], Options{})
	if err != nil {
		t.Fatal(err)
	}
	var union []uint64
	for w := range 3 {
		d, _, err := ReadPart(paths[0], w, 3, Options{})
		if err != nil {
			t.Fatal(err)
		}
		union = append(union, d.Keys...)
	}
	slices.Sort(union)
	if !slices.Equal(union, all.Keys) {
		t.Errorf("ReadPart parts union %v, want %v", union, all.Keys)
	}
}

func TestA9A(t *testing.T) {
	dir := testutil.DataDir(t, "a9a/a9a")
	for _, c := range []struct {
		file          string
		rows, pos     int
		maxKey        uint64
		lines, nnzMin int
	}{
		{"a9a", 32561, 7841, 122, 32561, 32561 * 13},
		{"a9a.t", 16281, 3846, 121, 16281, 16281 * 13},
	} {
		d, st, err := ReadFile(filepath.Join(dir, "a9a", c.file), Options{NumFeatures: 123})
		if err != nil {
			t.Fatal(err)
		}
		pos := 0
		for _, y := range d.Labels {
			pos += int(y)
		}
		mk, _ := d.MaxKey()
		if d.Len() != c.rows || pos != c.pos || mk != c.maxKey || st.Lines != int64(c.lines) || d.NNZ() < c.nnzMin {
			t.Errorf("%s: %d rows, %d positive, max key %d, %d lines, %d nnz; want %d, %d, %d, %d, >= %d",
				c.file, d.Len(), pos, mk, st.Lines, d.NNZ(), c.rows, c.pos, c.maxKey, c.lines, c.nnzMin)
		}
	}
	// With a smaller dimension the first out-of-range feature is reported.
	_, _, err := ReadFile(filepath.Join(dir, "a9a", "a9a"), Options{NumFeatures: 80})
	if !errors.Is(err, sparsedata.ErrKeyRange) || !strings.Contains(err.Error(), "a9a:1: token \"83:1\"") {
		t.Errorf("a9a with 80 features: %v, want ErrKeyRange at a9a:1 token 83:1", err)
	}
}

func TestRoundTrip(t *testing.T) {
	ex := sparsedata.Example{Label: 1, Keys: []uint64{0, 7, 1 << 40}, Vals: []float32{1, -0.1, 3.4028235e38}}
	line, err := AppendExample(nil, &ex, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "+1 1:1 8:-0.1 1099511627777:3.4028235e+38\n"; string(line) != want {
		t.Errorf("AppendExample = %q, want %q", line, want)
	}
	var back sparsedata.Example
	if ok, err := ParseLine(bytes.TrimSuffix(line, []byte("\n")), &back, Options{}); !ok || err != nil {
		t.Fatalf("reparse: %v %v", ok, err)
	}
	if back.Label != ex.Label || !slices.Equal(back.Keys, ex.Keys) || !slices.Equal(back.Vals, ex.Vals) {
		t.Errorf("round trip %+v, want %+v", back, ex)
	}
	for _, bad := range []sparsedata.Example{
		{Label: 0.5},
		{Label: 1, Keys: []uint64{2, 1}, Vals: []float32{1, 1}},
		{Label: 1, Keys: []uint64{1 << 63, 1<<64 - 1}, Vals: []float32{1, 1}},
	} {
		if _, err := AppendExample(nil, &bad, false); err == nil {
			t.Errorf("AppendExample(%+v): no error", bad)
		}
	}
}

func TestNextAllocatesNothingPerLine(t *testing.T) {
	line := "+1 3:1 11:1 14:1 19:1 39:1 42:1 55:0.25 64:1 67:1 73:1 75:1 76:1 80:1 83:1\n"
	r, err := NewReader(strings.NewReader(strings.Repeat(line, 2000)), "mem", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != nil { // grow the Example's slices
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocates %v times per line, want 0", allocs)
	}
}

func BenchmarkReadA9A(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(testutil.DataDir(b, "a9a/a9a"), "a9a", "a9a"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data), "a9a", Options{NumFeatures: 123})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := r.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkReadReal parses lines with real-valued features.
func BenchmarkReadReal(b *testing.B) {
	var buf bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&buf, "%d", 2*(i%2)-1)
		for j := range 30 {
			fmt.Fprintf(&buf, " %d:%.6g", 1+j*37+i%37, float64(i*j%1000)/997)
		}
		buf.WriteByte('\n')
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, _ := NewReader(bytes.NewReader(data), "real", Options{})
		if _, err := sparsedata.ReadAll(r); err != nil {
			b.Fatal(err)
		}
	}
}
