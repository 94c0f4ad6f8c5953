package criteo

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
)

// refParse is a plain reference for Reader.parse built on strings.Split,
// strconv and hash/fnv. It returns the keys, the label and whether the line
// is valid.
func refParse(line string, nInt, nCat int) (label float32, keys []uint64, ok bool) {
	fields := strings.Split(line, "\t")
	if len(fields) != 1+nInt+nCat {
		return 0, nil, false
	}
	switch fields[0] {
	case "1":
		label = 1
	case "0":
	default:
		return 0, nil, false
	}
	for f, s := range fields[1:] {
		switch {
		case s == "":
		case f < nInt:
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, nil, false
			}
			keys = append(keys, refIntKey(f, Bucket(v)))
		default:
			keys = append(keys, refKey(f, 'C', []byte(s)))
		}
	}
	return label, keys, true
}

func FuzzCriteoLine(f *testing.F) {
	f.Add(realLine, false)
	f.Add(strings.Replace(realLine, "1382", "13x2", 1), false)
	f.Add(strings.TrimSuffix(realLine, "\t9727dd16"), false)
	f.Add("1\t-5\tabc\t", true)
	f.Add("0\t\t\t", true)
	f.Add("0\t99999999999999999999\tx\ty", true)
	f.Add("2\t1\tx\ty", true)
	f.Fuzz(func(t *testing.T, line string, small bool) {
		nInt, nCat := 13, 26
		if small {
			nInt, nCat = 1, 2 // random inputs hit valid lines more often
		}
		p, err := NewParser(Options{IntFields: nInt, CatFields: nCat})
		if err != nil {
			t.Fatal(err)
		}
		var ex sparsedata.Example
		err = p.ParseLine([]byte(line), &ex)
		label, keys, ok := refParse(line, nInt, nCat)
		if err != nil {
			var pe *sparsedata.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, sparsedata.ErrSyntax) {
				t.Fatalf("error %v is not a *sparsedata.ParseError wrapping ErrSyntax", err)
			}
			if ok {
				t.Fatalf("ParseLine(%q) failed (%v), the reference accepts it", line, err)
			}
			if pe.Token != "" && !strings.Contains(line, strings.TrimSuffix(pe.Token, "...")) {
				t.Fatalf("ParseLine(%q) blames token %q, not in the line", line, pe.Token)
			}
			return
		}
		if !ok {
			t.Fatalf("ParseLine(%q) = %+v, the reference rejects it", line, ex)
		}
		if ex.Label != label || !slices.Equal(ex.Keys, keys) || len(ex.Vals) != len(keys) {
			t.Fatalf("ParseLine(%q) = %+v, reference label %v keys %v", line, ex, label, keys)
		}
		for _, v := range ex.Vals {
			if v != 1 {
				t.Fatalf("ParseLine(%q): value %v, want all 1", line, v)
			}
		}
		// The number of keys is the number of non-empty fields.
		nonEmpty := 0
		for _, s := range strings.Split(line, "\t")[1:] {
			if s != "" {
				nonEmpty++
			}
		}
		if len(ex.Keys) != nonEmpty {
			t.Fatalf("ParseLine(%q): %d keys for %d non-empty fields", line, len(ex.Keys), nonEmpty)
		}
	})
}
