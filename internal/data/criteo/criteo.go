package criteo

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/paramserv/paramserv/internal/data/sparsedata"
	"github.com/paramserv/paramserv/internal/progress"
)

// The layout of the Criteo Display Advertising Challenge data.
const (
	DefaultIntFields = 13
	DefaultCatFields = 26
)

// Options configure a Reader. The zero Options read the standard 13+26
// layout with full 64-bit keys and stop at the first malformed line.
type Options struct {
	// IntFields and CatFields give the layout; both 0 means 13 and 26.
	IntFields, CatFields int
	// KeyBits, when in 1..63, masks every key to its low KeyBits bits.
	KeyBits int
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

// layout resolves the defaults and checks o.
func (o *Options) layout() (nInt, nCat int, mask uint64, err error) {
	nInt, nCat = o.IntFields, o.CatFields
	if nInt == 0 && nCat == 0 {
		nInt, nCat = DefaultIntFields, DefaultCatFields
	}
	if nInt < 0 || nCat < 0 || nInt+nCat > 1<<16 {
		return 0, 0, 0, fmt.Errorf("criteo: invalid layout %d integer + %d categorical fields (want 0..65536 in all)", nInt, nCat)
	}
	mask = math.MaxUint64
	switch {
	case o.KeyBits == 0 || o.KeyBits == 64:
	case o.KeyBits > 0 && o.KeyBits < 64:
		mask = 1<<o.KeyBits - 1
	default:
		return 0, 0, 0, fmt.Errorf("criteo: invalid KeyBits %d (want 0..64)", o.KeyBits)
	}
	return nInt, nCat, mask, nil
}

// RegisterFlags binds -fields ("INT,CAT", e.g. "13,26" or "0,40") and
// -key-bits to o, with o's current values as defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(fieldsFlag{o}, "fields", "layout of each line after the label: INT,CAT = number of integer and of categorical fields")
	fs.IntVar(&o.KeyBits, "key-bits", o.KeyBits, "mask feature keys to their low `bits` (0: full 64-bit keys)")
}

type fieldsFlag struct{ o *Options }

func (f fieldsFlag) String() string {
	if f.o == nil {
		return ""
	}
	nInt, nCat := f.o.IntFields, f.o.CatFields
	if nInt == 0 && nCat == 0 {
		nInt, nCat = DefaultIntFields, DefaultCatFields
	}
	return fmt.Sprintf("%d,%d", nInt, nCat)
}

func (f fieldsFlag) Set(s string) error {
	a, b, ok := strings.Cut(s, ",")
	nInt, err1 := strconv.Atoi(strings.TrimSpace(a))
	nCat, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || nInt < 0 || nCat < 0 || nInt+nCat == 0 {
		return fmt.Errorf("want INT,CAT field counts such as 13,26, got %q", s)
	}
	f.o.IntFields, f.o.CatFields = nInt, nCat
	return nil
}

// Reader streams the examples of one Criteo-style file. It is used by one
// goroutine at a time.
type Reader struct {
	lr         *sparsedata.LineReader
	opts       Options
	nInt, nCat int
	mask       uint64
	seeds      []uint64           // per-field hash state after field number and tag
	ex         sparsedata.Example // returned by Next, reused
	stats      sparsedata.Stats   // Examples and Skipped; Lines comes from lr
}

var _ sparsedata.Source = (*Reader)(nil)

// NewReader returns a Reader of r; name (usually the path) is used in
// errors. It fails only on invalid options.
func NewReader(r io.Reader, name string, opts Options) (*Reader, error) {
	return newReader(r, name, opts, 0)
}

func newReader(r io.Reader, name string, opts Options, firstIndex int64) (*Reader, error) {
	p, err := newParser(&opts)
	if err != nil {
		return nil, err
	}
	lr, err := sparsedata.NewLineReader(r, sparsedata.LineConfig{
		Name:         name,
		MaxLineBytes: opts.MaxLineBytes,
		Partition:    opts.Partition,
		FirstIndex:   firstIndex,
	})
	if err != nil {
		return nil, fmt.Errorf("criteo: %w", err)
	}
	p.lr = lr
	return p, nil
}

func newParser(opts *Options) (*Reader, error) {
	nInt, nCat, mask, err := opts.layout()
	if err != nil {
		return nil, err
	}
	p := &Reader{opts: *opts, nInt: nInt, nCat: nCat, mask: mask, seeds: make([]uint64, nInt+nCat)}
	for f := range p.seeds {
		tag := byte('C')
		if f < nInt {
			tag = 'I'
		}
		p.seeds[f] = fieldSeed(f, tag)
	}
	return p, nil
}

// Next returns the next example of this worker's part, or io.EOF after the
// last. The Example and its slices are reused by the next call. After a
// *sparsedata.ParseError the Reader may go on with the following line.
func (r *Reader) Next() (*sparsedata.Example, error) {
	return sparsedata.NextExample(r.lr, &r.ex, &r.stats, func(line []byte, ex *sparsedata.Example) (bool, error) {
		return true, r.parse(line, ex)
	}, r.opts.SkipBadLines, r.opts.OnSkip)
}

// Stats reports the lines scanned, examples returned and lines skipped.
func (r *Reader) Stats() sparsedata.Stats {
	s := r.stats
	s.Lines = r.lr.Lines()
	return s
}

// Parser parses single lines; see NewParser.
type Parser struct{ r *Reader }

// NewParser returns a Parser for the layout and key options of opts (the
// reading options are ignored). A Parser is used by one goroutine at a time.
func NewParser(opts Options) (*Parser, error) {
	r, err := newParser(&opts)
	if err != nil {
		return nil, err
	}
	return &Parser{r: r}, nil
}

// ParseLine parses one line (without its newline) into ex, reusing ex's
// slices. Unlike LIBSVM, a Criteo line is never blank: an empty line is an
// error. Errors are *sparsedata.ParseError without File and Line.
func (p *Parser) ParseLine(line []byte, ex *sparsedata.Example) error {
	return p.r.parse(line, ex)
}

func (r *Reader) parse(line []byte, ex *sparsedata.Example) error {
	ex.Reset()
	want := 1 + r.nInt + r.nCat
	tab := bytes.IndexByte(line, '\t')
	if tab < 0 {
		return r.countError(line)
	}
	switch string(line[:tab]) {
	case "1":
		ex.Label = 1
	case "0":
	default:
		return sparsedata.NewParseError(sparsedata.ErrSyntax, line[:tab], "label must be 0 or 1")
	}
	rest := line[tab+1:]
	for f := 0; f < want-1; f++ {
		var fld []byte
		if f == want-2 {
			if bytes.IndexByte(rest, '\t') >= 0 {
				return r.countError(line)
			}
			fld = rest
		} else {
			tab = bytes.IndexByte(rest, '\t')
			if tab < 0 {
				return r.countError(line)
			}
			fld, rest = rest[:tab], rest[tab+1:]
		}
		if len(fld) == 0 {
			continue // missing
		}
		var k uint64
		if f < r.nInt {
			v, err := strconv.ParseInt(string(fld), 10, 64)
			if err != nil {
				return sparsedata.NewParseError(sparsedata.ErrSyntax, fld, "integer field I%d is not an integer", f+1)
			}
			k = hashInt(r.seeds[f], Bucket(v))
		} else {
			k = hashBytes(r.seeds[f], fld)
		}
		ex.Keys = append(ex.Keys, k&r.mask)
		ex.Vals = append(ex.Vals, 1)
	}
	return nil
}

func (r *Reader) countError(line []byte) error {
	return sparsedata.NewParseError(sparsedata.ErrSyntax, nil,
		"expected %d tab-separated fields (label, %d integer, %d categorical), found %d",
		1+r.nInt+r.nCat, r.nInt, r.nCat, bytes.Count(line, []byte{'\t'})+1)
}

// Bucket maps an integer feature value to its bucket: floor(ln(v)^2) for
// v > 2, else v.
func Bucket(v int64) int64 {
	if v <= 2 {
		return v
	}
	l := math.Log(float64(v))
	return int64(l * l)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fieldSeed is the FNV-1a state after the field number and the tag.
func fieldSeed(field int, tag byte) uint64 {
	h := uint64(fnvOffset)
	f := uint32(field)
	for range 4 {
		h ^= uint64(f & 0xff)
		h *= fnvPrime
		f >>= 8
	}
	h ^= uint64(tag)
	h *= fnvPrime
	return h
}

func hashBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return fmix64(h)
}

func hashInt(h uint64, v int64) uint64 {
	u := uint64(v)
	for range 8 {
		h ^= u & 0xff
		h *= fnvPrime
		u >>= 8
	}
	return fmix64(h)
}

// fmix64 is MurmurHash3's 64-bit finaliser with another odd second
// multiplier than the published one (…fe1a85ec53): still a bijection, but
// not mix.Murmur3, and kept as it is because the keys of every Criteo
// model depend on it.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb93fe53a5d43
	h ^= h >> 33
	return h
}

// CatKey is the key of categorical value v in field (numbered from 0 over
// all columns after the label), before KeyBits masking.
func CatKey(field int, v []byte) uint64 { return hashBytes(fieldSeed(field, 'C'), v) }

// IntKey is the key of integer bucket b (see Bucket) in field, before
// KeyBits masking.
func IntKey(field int, b int64) uint64 { return hashInt(fieldSeed(field, 'I'), b) }

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
