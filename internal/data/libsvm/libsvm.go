package libsvm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
	"github.com/paramserv/paramserv/internal/progress"
)

// Options configure a Reader. The zero Options read a whole 1-based file
// with no bound on the keys and stop at the first malformed line.
type Options struct {
	// NumFeatures, when > 0, is the dimension: every key must be below it.
	NumFeatures uint64
	// ZeroBased takes indices as keys unchanged (index 0 allowed) instead
	// of key = index-1.
	ZeroBased bool
	// SkipBadLines skips malformed lines (counted in Stats().Skipped)
	// instead of returning their error.
	SkipBadLines bool
	// OnSkip, if set, is called with the error of each skipped line.
	OnSkip func(*sparsedata.ParseError)
	// MaxLineBytes bounds a line; 0 means sparsedata.DefaultMaxLineBytes.
	MaxLineBytes int
	// Partition selects this worker's lines; the zero value takes all.
	Partition sparsedata.Partition
	// Progress, if set, is told how far ReadFiles has come (bytes of the
	// files read, examples, the files' total size) and logs it; the
	// readers of one file (Opener, sparsedata.NewStream) do not use it.
	Progress *progress.Meter
}

// Reader streams the examples of one LIBSVM file. It is used by one
// goroutine at a time.
type Reader struct {
	lr    *sparsedata.LineReader
	opts  Options
	ex    sparsedata.Example // returned by Next, reused
	stats sparsedata.Stats   // Examples and Skipped; Lines comes from lr
}

var _ sparsedata.Source = (*Reader)(nil)

// NewReader returns a Reader of r; name (usually the path) is used in
// errors. It fails only on invalid options.
func NewReader(r io.Reader, name string, opts Options) (*Reader, error) {
	return newReader(r, name, opts, 0)
}

func newReader(r io.Reader, name string, opts Options, firstIndex int64) (*Reader, error) {
	lr, err := sparsedata.NewLineReader(r, sparsedata.LineConfig{
		Name:         name,
		MaxLineBytes: opts.MaxLineBytes,
		Partition:    opts.Partition,
		FirstIndex:   firstIndex,
	})
	if err != nil {
		return nil, fmt.Errorf("libsvm: %w", err)
	}
	return &Reader{lr: lr, opts: opts}, nil
}

// Next returns the next example of this worker's part, or io.EOF after the
// last. The Example and its slices are reused by the next call. After a
// *sparsedata.ParseError the Reader may go on with the following line.
func (r *Reader) Next() (*sparsedata.Example, error) {
	return sparsedata.NextExample(r.lr, &r.ex, &r.stats, func(line []byte, ex *sparsedata.Example) (bool, error) {
		return parseLine(line, ex, &r.opts)
	}, r.opts.SkipBadLines, r.opts.OnSkip)
}

// Stats reports the lines scanned, examples returned and lines skipped.
func (r *Reader) Stats() sparsedata.Stats {
	s := r.stats
	s.Lines = r.lr.Lines()
	return s
}

// ParseLine parses one line (without its newline) into ex, reusing ex's
// slices. It returns false for a blank or comment-only line. Errors are
// *sparsedata.ParseError without File and Line.
func ParseLine(line []byte, ex *sparsedata.Example, opts Options) (bool, error) {
	return parseLine(line, ex, &opts)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// nextToken splits off the first blank-separated token of s.
func nextToken(s []byte) (tok, rest []byte) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && !isSpace(s[j]) {
		j++
	}
	return s[i:j], s[j:]
}

func parseLabel(tok []byte) (float32, bool) {
	switch string(tok) {
	case "1", "+1":
		return 1, true
	case "-1", "0":
		return 0, true
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	switch {
	case err != nil:
		return 0, false
	case f == 1:
		return 1, true
	case f == -1 || f == 0:
		return 0, true
	}
	return 0, false
}

func parseValue(tok []byte) (float32, error) {
	if len(tok) == 1 && tok[0] == '1' {
		return 1, nil // a binary feature: the common case
	}
	if len(tok) == 0 {
		return 0, sparsedata.ErrSyntax // reported as "missing value"
	}
	f, err := strconv.ParseFloat(string(tok), 32)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errNotFinite
	}
	return float32(f), nil
}

var errNotFinite = errors.New("not finite")

func parseLine(line []byte, ex *sparsedata.Example, o *Options) (bool, error) {
	ex.Reset()
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	tok, rest := nextToken(line)
	if len(tok) == 0 {
		return false, nil
	}
	label, ok := parseLabel(tok)
	if !ok {
		return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "label must be +1, 1, -1 or 0")
	}
	ex.Label = label
	var prev uint64
	first := true
	for {
		tok, rest = nextToken(rest)
		if len(tok) == 0 {
			return true, nil
		}
		idx, vb, ok := splitFast(tok)
		if !ok {
			colon := bytes.IndexByte(tok, ':')
			if colon < 0 {
				return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "expected index:value")
			}
			ib := tok[:colon]
			vb = tok[colon+1:]
			if string(ib) == "qid" {
				if _, err := strconv.ParseUint(string(vb), 10, 64); err != nil {
					return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "qid is not a non-negative integer")
				}
				continue
			}
			var err error
			if idx, err = strconv.ParseUint(string(ib), 10, 64); err != nil {
				return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "index is not a non-negative integer")
			}
		}
		key := idx
		if !o.ZeroBased {
			if idx == 0 {
				return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "index 0 in a 1-based file (indices start at 1)")
			}
			key = idx - 1
		}
		if !first && key <= prev {
			return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok,
				"index %d not after the previous index %d (indices must be strictly increasing)", idx, prevIndex(prev, o))
		}
		if o.NumFeatures > 0 && key >= o.NumFeatures {
			return false, sparsedata.NewParseError(sparsedata.ErrKeyRange, tok,
				"index %d out of range: %d features (indices %d..%d)", idx, o.NumFeatures, base(o), o.NumFeatures-1+base(o))
		}
		v, err := parseValue(vb)
		if err != nil {
			msg := "value is not a number"
			switch {
			case len(vb) == 0:
				msg = "missing value after ':'"
			case err == errNotFinite:
				msg = "value is not finite"
			case errors.Is(err, strconv.ErrRange):
				msg = "value out of float32 range"
			}
			return false, sparsedata.NewParseError(sparsedata.ErrSyntax, tok, "%s", msg)
		}
		ex.Keys = append(ex.Keys, key)
		ex.Vals = append(ex.Vals, v)
		prev, first = key, false
	}
}

// splitFast splits the common token form "<digits>:<value>" with an index
// of at most 19 digits (no overflow possible); anything else is left to the
// general path.
func splitFast(tok []byte) (idx uint64, val []byte, ok bool) {
	i := 0
	for ; i < len(tok) && i < 19; i++ {
		c := tok[i] - '0'
		if c > 9 {
			break
		}
		idx = idx*10 + uint64(c)
	}
	if i == 0 || i >= len(tok) || tok[i] != ':' {
		return 0, nil, false
	}
	return idx, tok[i+1:], true
}

func base(o *Options) uint64 {
	if o.ZeroBased {
		return 0
	}
	return 1
}

func prevIndex(key uint64, o *Options) uint64 { return key + base(o) }

// AppendExample appends ex to dst as one LIBSVM line ending in "\n": the
// label as "+1" or "-1", then index:value pairs with index = key+1 (key
// when zeroBased) and values in the shortest form that reads back as the
// same float32. It fails if the label is not 0 or 1, keys are not strictly
// increasing, a value is not finite, or a key has no 1-based index.
func AppendExample(dst []byte, ex *sparsedata.Example, zeroBased bool) ([]byte, error) {
	switch ex.Label {
	case 1:
		dst = append(dst, "+1"...)
	case 0:
		dst = append(dst, "-1"...)
	default:
		return dst, fmt.Errorf("libsvm: label %v is not 0 or 1", ex.Label)
	}
	if len(ex.Keys) != len(ex.Vals) {
		return dst, fmt.Errorf("libsvm: %d keys but %d values", len(ex.Keys), len(ex.Vals))
	}
	for i, k := range ex.Keys {
		if i > 0 && k <= ex.Keys[i-1] {
			return dst, fmt.Errorf("libsvm: key %d not after key %d (keys must be strictly increasing)", k, ex.Keys[i-1])
		}
		idx := k
		if !zeroBased {
			if k == math.MaxUint64 {
				return dst, fmt.Errorf("libsvm: key %d has no 1-based index", k)
			}
			idx = k + 1
		}
		v := float64(ex.Vals[i])
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return dst, fmt.Errorf("libsvm: value %v of key %d is not finite", v, k)
		}
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, idx, 10)
		dst = append(dst, ':')
		dst = strconv.AppendFloat(dst, v, 'g', -1, 32)
	}
	return append(dst, '\n'), nil
}

// ReadFile reads all of this worker's examples of one file (".gz"
// decompressed) into a Dataset.
func ReadFile(path string, opts Options) (*sparsedata.Dataset, sparsedata.Stats, error) {
	return ReadFiles([]string{path}, opts)
}

// ReadPart reads worker's part (of numWorkers) of one file: the lines whose
// 0-based index i has i mod numWorkers == worker. The parts of workers
// 0..numWorkers-1 are disjoint and cover the file.
func ReadPart(path string, worker, numWorkers int, opts Options) (*sparsedata.Dataset, sparsedata.Stats, error) {
	opts.Partition = sparsedata.Partition{Worker: worker, NumWorkers: numWorkers}
	return ReadFiles([]string{path}, opts)
}

// ReadFiles reads this worker's examples of several files, in order, into
// one Dataset. Lines are numbered for the partition across all the files.
func ReadFiles(paths []string, opts Options) (*sparsedata.Dataset, sparsedata.Stats, error) {
	return sparsedata.LoadFilesMeter(paths, Opener(opts), opts.Progress)
}

// Opener returns the sparsedata.Opener of files read with opts, for
// sparsedata.LoadFiles and sparsedata.NewStream.
func Opener(opts Options) sparsedata.Opener {
	return func(r io.Reader, name string, first int64) (sparsedata.Source, error) {
		return newReader(r, name, opts, first)
	}
}
