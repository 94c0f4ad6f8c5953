package criteo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
)

// realLine is the first line of the Criteo challenge's train.txt layout:
// label, 13 integer fields (I12 missing), 26 categorical (C22 missing).
const realLine = "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16"

// refKey is the documented key rule written with hash/fnv.
func refKey(field int, tag byte, content []byte) uint64 {
	h := fnv.New64a()
	var f [4]byte
	binary.LittleEndian.PutUint32(f[:], uint32(field))
	h.Write(f[:])
	h.Write([]byte{tag})
	h.Write(content)
	return fmix64(h.Sum64())
}

func refIntKey(field int, b int64) uint64 {
	var c [8]byte
	binary.LittleEndian.PutUint64(c[:], uint64(b))
	return refKey(field, 'I', c[:])
}

func TestKeysFollowTheDocumentedRule(t *testing.T) {
	for f := range 40 {
		for _, v := range []string{"", "68fd1e64", "x", "a longer categorical value"} {
			if got, want := CatKey(f, []byte(v)), refKey(f, 'C', []byte(v)); got != want {
				t.Errorf("CatKey(%d, %q) = %#x, want %#x", f, v, got, want)
			}
		}
		for _, b := range []int64{-3, 0, 1, 52, 1 << 40} {
			if got, want := IntKey(f, b), refIntKey(f, b); got != want {
				t.Errorf("IntKey(%d, %d) = %#x, want %#x", f, b, got, want)
			}
		}
	}
	// Pinned values: keys must not change between releases, or saved
	// models stop matching their data.
	if got := CatKey(13, []byte("68fd1e64")); got != 0x7b50ea402a852d05 {
		t.Errorf("CatKey(13, 68fd1e64) = %#x, changed", got)
	}
	if got := IntKey(4, 52); got != 0x15a440401f455bdd {
		t.Errorf("IntKey(4, 52) = %#x, changed", got)
	}
}

func TestBucket(t *testing.T) {
	for _, c := range [][2]int64{{-3, -3}, {0, 0}, {1, 1}, {2, 2}, {3, 1}, {10, 5}, {1382, 52}, {1 << 62, 1846}} {
		if got := Bucket(c[0]); got != c[1] {
			t.Errorf("Bucket(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

func TestParseRealLine(t *testing.T) {
	p, err := NewParser(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ex sparsedata.Example
	if err := p.ParseLine([]byte(realLine), &ex); err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(realLine, "\t")[1:]
	var want []uint64
	for f, s := range fields {
		switch {
		case s == "":
		case f < 13:
			v, _ := strconv.ParseInt(s, 10, 64)
			want = append(want, IntKey(f, Bucket(v)))
		default:
			want = append(want, CatKey(f, []byte(s)))
		}
	}
	if ex.Label != 0 || !slices.Equal(ex.Keys, want) || len(ex.Vals) != 37 || slices.ContainsFunc(ex.Vals, func(v float32) bool { return v != 1 }) {
		t.Errorf("ParseLine(real line) = %+v, want label 0, 37 keys %v, all values 1", ex, want)
	}
	// Masked keys.
	p, _ = NewParser(Options{KeyBits: 20})
	var m sparsedata.Example
	if err := p.ParseLine([]byte(realLine), &m); err != nil {
		t.Fatal(err)
	}
	for i, k := range m.Keys {
		if k != ex.Keys[i]&(1<<20-1) {
			t.Errorf("KeyBits 20: key %d = %#x, want %#x", i, k, ex.Keys[i]&(1<<20-1))
		}
	}
}

func TestParseBad(t *testing.T) {
	for _, c := range []struct {
		opts  Options
		line  string
		token string
		msg   string
	}{
		{Options{IntFields: 1, CatFields: 2}, "1\t5\ta\tb", "", ""},
		{Options{IntFields: 1, CatFields: 2}, "2\t5\ta\tb", "2", "label must be 0 or 1"},
		{Options{IntFields: 1, CatFields: 2}, "\t5\ta\tb", "", "label must be 0 or 1"},
		{Options{IntFields: 1, CatFields: 2}, "1\t5x\ta\tb", "5x", "integer field I1 is not an integer"},
		{Options{IntFields: 1, CatFields: 2}, "1\t1.5\ta\tb", "1.5", "integer field I1 is not an integer"},
		{Options{IntFields: 1, CatFields: 2}, "1\t5\ta", "", "expected 4 tab-separated fields (label, 1 integer, 2 categorical), found 3"},
		{Options{IntFields: 1, CatFields: 2}, "1\t5\ta\tb\t", "", "found 5"},
		{Options{IntFields: 1, CatFields: 2}, "1", "", "found 1"},
		{Options{IntFields: 1, CatFields: 2}, "", "", "found 1"},
		{Options{}, strings.Replace(realLine, "\t", "\t\t", 1), "", "expected 40 tab-separated fields (label, 13 integer, 26 categorical), found 41"},
	} {
		p, err := NewParser(c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var ex sparsedata.Example
		err = p.ParseLine([]byte(c.line), &ex)
		if c.msg == "" {
			if err != nil {
				t.Errorf("ParseLine(%q): %v", c.line, err)
			}
			continue
		}
		var pe *sparsedata.ParseError
		if !errors.As(err, &pe) || !errors.Is(err, sparsedata.ErrSyntax) || pe.Token != c.token || !strings.Contains(pe.Msg, c.msg) {
			t.Errorf("ParseLine(%q) = %v; want token %q and %q", c.line, err, c.token, c.msg)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Options{{IntFields: -1, CatFields: 3}, {KeyBits: 65}, {KeyBits: -1}, {Partition: sparsedata.Partition{Worker: 3, NumWorkers: 3}}} {
		if _, err := NewReader(strings.NewReader(""), "x", o); err == nil {
			t.Errorf("NewReader(%+v): no error", o)
		}
	}
}

func TestReaderErrorsAndSkips(t *testing.T) {
	data := "1\t3\tab\n" + // 1 ok
		"0\t\t\n" + // 2 ok, no keys
		"0\tx\tab\n" + // 3 bad integer
		"1\t4\n" + // 4 too few fields
		"1\t7\tcd\r\n" + // 5 ok
		"1\t7\t" + strings.Repeat("e", 50) + "\n" + // 6 too long
		"0\t-1\tzz" // 7 ok, no final newline
	opts := Options{IntFields: 1, CatFields: 1, MaxLineBytes: 40}
	r, err := NewReader(strings.NewReader(data), "day_0", opts)
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
			continue
		}
		got = append(got, fmt.Sprintf("%v/%d", ex.Label, len(ex.Keys)))
	}
	want := []string{
		"1/2", "0/0",
		`day_0:3: token "x": integer field I1 is not an integer`,
		"day_0:4: expected 3 tab-separated fields (label, 1 integer, 1 categorical), found 2",
		"1/2",
		"day_0:6: line longer than 40 bytes",
		"0/2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	opts.SkipBadLines = true
	var lines []int64
	opts.OnSkip = func(pe *sparsedata.ParseError) { lines = append(lines, pe.Line) }
	r, _ = NewReader(strings.NewReader(data), "day_0", opts)
	d, err := sparsedata.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 4 || r.Stats() != (sparsedata.Stats{Lines: 7, Examples: 4, Skipped: 3}) || !slices.Equal(lines, []int64{3, 4, 6}) {
		t.Errorf("skipping: %d examples, %+v, skipped lines %v; want 4, 7 lines/4/3 skipped, [3 4 6]", d.Len(), r.Stats(), lines)
	}
}

func TestPartitionDisjointAndCovering(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for f := range 3 {
		var b bytes.Buffer
		for i := range 100 + 50*f {
			fmt.Fprintf(&b, "%d\t%d\tv%d-%d\n", i%2, i, f, i) // the categorical value names the line
		}
		p := filepath.Join(dir, fmt.Sprintf("part-%05d.tsv", f))
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	opts := Options{IntFields: 1, CatFields: 1}
	all, st, err := ReadFiles(paths, opts)
	if err != nil || all.Len() != 450 || st.Lines != 450 {
		t.Fatalf("ReadFiles: %d examples, %+v, %v; want 450", all.Len(), st, err)
	}
	catKeys := func(d *sparsedata.Dataset) []uint64 {
		var ks []uint64
		for i := range d.Len() {
			ks = append(ks, d.At(i).Keys[1])
		}
		return ks
	}
	want := catKeys(all)
	slices.Sort(want)
	for n := 1; n <= 5; n++ {
		var union []uint64
		for w := range n {
			o := opts
			o.Partition = sparsedata.Partition{Worker: w, NumWorkers: n}
			d, _, err := ReadFiles(paths, o)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() < 450/n || d.Len() > 450/n+1 {
				t.Errorf("n=%d worker %d: %d examples, want %d or %d", n, w, d.Len(), 450/n, 450/n+1)
			}
			union = append(union, catKeys(d)...)
		}
		slices.Sort(union)
		if !slices.Equal(union, want) {
			t.Errorf("n=%d: the parts are not a disjoint cover (%d keys, want %d)", n, len(union), len(want))
		}
	}
	d, _, err := ReadPart(paths[0], 1, 4, opts)
	if err != nil || d.Len() != 25 {
		t.Errorf("ReadPart(worker 1 of 4) = %d examples, %v; want 25", d.Len(), err)
	}
}

func TestFieldsFlag(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"-fields", "0,40", "-key-bits", "24"}); err != nil {
		t.Fatal(err)
	}
	if o.IntFields != 0 || o.CatFields != 40 || o.KeyBits != 24 {
		t.Errorf("after -fields 0,40 -key-bits 24: %+v", o)
	}
	for _, bad := range []string{"13", "a,b", "0,0", "-1,3"} {
		if err := fs.Parse([]string{"-fields", bad}); err == nil {
			t.Errorf("-fields %q accepted", bad)
		}
	}
}

func TestNextAllocatesNothingPerLine(t *testing.T) {
	r, err := NewReader(strings.NewReader(strings.Repeat(realLine+"\n", 2000)), "mem", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Next allocates %v times per line, want 0", allocs)
	}
}

// syntheticDay returns n Criteo-like lines with ~5% missing fields.
func syntheticDay(n int) []byte {
	r := rand.New(rand.NewPCG(1, 1))
	var b bytes.Buffer
	for range n {
		b.WriteString(strconv.Itoa(r.IntN(4) / 3))
		for f := range 39 {
			b.WriteByte('\t')
			switch {
			case r.IntN(20) == 0:
			case f < 13:
				b.WriteString(strconv.Itoa(int(r.ExpFloat64() * 300)))
			default:
				fmt.Fprintf(&b, "%08x", r.Uint32()>>(r.IntN(28)))
			}
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func BenchmarkRead(b *testing.B) {
	data := syntheticDay(20000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data), "day", Options{})
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
