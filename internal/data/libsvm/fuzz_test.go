package libsvm

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
)

// refParse is a plain reference for parseLine built on strings and strconv,
// without the fast paths. It returns the example, whether the line holds
// one, and the first bad token (with ok false and bad non-nil on error).
func refParse(line string, o Options) (ex sparsedata.Example, ok bool, bad *string) {
	fail := func(tok string) (sparsedata.Example, bool, *string) { return sparsedata.Example{}, false, &tok }
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	toks := strings.FieldsFunc(line, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	if len(toks) == 0 {
		return ex, false, nil
	}
	switch f, err := strconv.ParseFloat(toks[0], 64); {
	case err == nil && f == 1:
		ex.Label = 1
	case err == nil && (f == 0 || f == -1):
	default:
		return fail(toks[0])
	}
	for _, tok := range toks[1:] {
		is, vs, found := strings.Cut(tok, ":")
		if !found {
			return fail(tok)
		}
		if is == "qid" {
			if _, err := strconv.ParseUint(vs, 10, 64); err != nil {
				return fail(tok)
			}
			continue
		}
		idx, err := strconv.ParseUint(is, 10, 64)
		if err != nil || (!o.ZeroBased && idx == 0) {
			return fail(tok)
		}
		key := idx
		if !o.ZeroBased {
			key--
		}
		if n := len(ex.Keys); n > 0 && key <= ex.Keys[n-1] {
			return fail(tok)
		}
		if o.NumFeatures > 0 && key >= o.NumFeatures {
			return fail(tok)
		}
		v, err := strconv.ParseFloat(vs, 32)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return fail(tok)
		}
		ex.Keys = append(ex.Keys, key)
		ex.Vals = append(ex.Vals, float32(v))
	}
	return ex, true, nil
}

func sameExample(a, b *sparsedata.Example) bool {
	bits := func(v []float32) []uint32 {
		out := make([]uint32, len(v))
		for i, x := range v {
			out[i] = math.Float32bits(x)
		}
		return out
	}
	return a.Label == b.Label && slices.Equal(a.Keys, b.Keys) && slices.Equal(bits(a.Vals), bits(b.Vals))
}

// seedLines are real a9a lines (the data may be absent) and tricky ones.
var seedLines = []string{
	"-1 3:1 11:1 14:1 19:1 39:1 42:1 55:1 64:1 67:1 73:1 75:1 76:1 80:1 83:1 ",
	"+1 5:1 7:1 14:1 19:1 39:1 40:1 51:1 63:1 67:1 73:1 74:1 76:1 78:1 83:1 ",
	"1 qid:3 1:0.5 2:-1e-3 10:7\r",
	"0 1:1 # comment 2:x",
	"-1 3:x",
	"+1 5:1 3:1",
	"+1 0:1",
	"2 1:1",
	"+1 18446744073709551616:1",
	"+1 99999999999999999999:1",
	"+1 1:1e39",
	"+1 1:nan 2:inf",
	"\t  ",
	"+1 1:0x1p-2 2:1_0",
}

func FuzzLibSVMLine(f *testing.F) {
	for _, l := range seedLines {
		f.Add(l, uint8(0))
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "shared", "data", "a9a", "a9a.t")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for i := 0; i < 8 && sc.Scan(); i++ {
			f.Add(sc.Text(), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, line string, mode uint8) {
		o := Options{ZeroBased: mode&1 != 0}
		if mode&2 != 0 {
			o.NumFeatures = 123
		}
		checkStream(t, line)
		var ex sparsedata.Example
		ok, err := ParseLine([]byte(line), &ex, o)
		ref, refOK, bad := refParse(line, o)

		// The fast parser agrees with the reference.
		if err != nil {
			var pe *sparsedata.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *sparsedata.ParseError", err)
			}
			if bad == nil {
				t.Fatalf("ParseLine(%q) failed (%v), the reference accepts it", line, err)
			}
			if want := (&sparsedata.ParseError{Token: *bad}).Token; len(want) <= 64 && pe.Token != want {
				t.Fatalf("ParseLine(%q) blames %q, the reference %q", line, pe.Token, want)
			}
			return
		}
		if bad != nil {
			t.Fatalf("ParseLine(%q) = %+v, the reference rejects token %q", line, ex, *bad)
		}
		if ok != refOK || (ok && !sameExample(&ex, &ref)) {
			t.Fatalf("ParseLine(%q) = %v %+v, reference %v %+v", line, ok, ex, refOK, ref)
		}
		if !ok {
			return
		}
		// Writing the example and reading it back gives it again.
		out, err := AppendExample(nil, &ex, o.ZeroBased)
		if err != nil {
			t.Fatalf("AppendExample(%+v): %v", ex, err)
		}
		var back sparsedata.Example
		if ok, err := ParseLine(bytes.TrimSuffix(out, []byte("\n")), &back, o); !ok || err != nil || !sameExample(&ex, &back) {
			t.Fatalf("%q -> %q -> %v %v %+v, want %+v", line, out, ok, err, back, ex)
		}
	})
}

// checkStream reads line twice as a stream with a small line limit,
// skipping bad lines, and checks that every line is accounted for.
func checkStream(t *testing.T, line string) {
	t.Helper()
	stream := line + "\n" + line
	r, err := NewReader(strings.NewReader(stream), "fuzz", Options{SkipBadLines: true, MaxLineBytes: 40})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sparsedata.ReadAll(r); err != nil {
		t.Fatalf("ReadAll with SkipBadLines: %v", err)
	}
	st := r.Stats()
	want := int64(strings.Count(stream, "\n"))
	if !strings.HasSuffix(stream, "\n") {
		want++
	}
	if st.Lines != want {
		t.Fatalf("Stats %+v, want %d lines", st, want)
	}
	if st.Examples+st.Skipped > st.Lines {
		t.Fatalf("Stats %+v: more examples and skips than lines", st)
	}
}
