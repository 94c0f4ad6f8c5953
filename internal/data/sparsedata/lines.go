package sparsedata

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLineBytes bounds a line when a reader is given no limit.
const DefaultMaxLineBytes = 1 << 20

// Partition names one worker's part of the input: the physical lines whose
// 0-based index i has i mod NumWorkers == Worker. The zero Partition (and
// NumWorkers == 1) takes every line.
type Partition struct {
	Worker     int
	NumWorkers int
}

// Validate reports whether p names a worker of a valid set.
func (p Partition) Validate() error {
	if p.NumWorkers < 0 || p.Worker < 0 || (p.NumWorkers == 0 && p.Worker != 0) ||
		(p.NumWorkers > 0 && p.Worker >= p.NumWorkers) {
		return fmt.Errorf("sparse: invalid partition: worker %d of %d (want 0 <= worker < numWorkers)", p.Worker, p.NumWorkers)
	}
	return nil
}

// Owns reports whether the line with 0-based index i belongs to p.
func (p Partition) Owns(i int64) bool {
	return p.NumWorkers <= 1 || i%int64(p.NumWorkers) == int64(p.Worker)
}

// LineConfig configures a LineReader.
type LineConfig struct {
	Name         string    // file name for errors
	MaxLineBytes int       // longest line accepted, without its terminator; 0: DefaultMaxLineBytes
	Partition    Partition // which lines to return
	FirstIndex   int64     // partition index of the first line (lines of earlier files)
}

// LineReader splits a stream into lines for a parser: it keeps the line
// count, enforces the length limit and drops the lines of other workers.
// It is used by one goroutine at a time.
type LineReader struct {
	br    *bufio.Reader
	cfg   LineConfig
	lines int64 // physical lines consumed so far
	done  bool
}

// NewLineReader returns a LineReader over r. Its buffer holds one line of
// cfg.MaxLineBytes.
func NewLineReader(r io.Reader, cfg LineConfig) (*LineReader, error) {
	if err := cfg.Partition.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxLineBytes < 0 {
		return nil, fmt.Errorf("sparse: invalid MaxLineBytes %d (want >= 0)", cfg.MaxLineBytes)
	}
	if cfg.MaxLineBytes == 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	// +2 for "\r\n"; bufio's minimum buffer is 16 bytes.
	return &LineReader{br: bufio.NewReaderSize(r, max(cfg.MaxLineBytes+2, 16)), cfg: cfg}, nil
}

// Lines is the number of physical lines consumed so far.
func (lr *LineReader) Lines() int64 { return lr.lines }

// Name is the file name given in the LineConfig.
func (lr *LineReader) Name() string { return lr.cfg.Name }

// Next returns the next line of this worker's part, without its "\n" or
// "\r\n", and its 1-based line number. The line aliases the reader's buffer
// and is valid until the next call. After the last line Next returns
// io.EOF. A line longer than MaxLineBytes is consumed and reported as a
// *ParseError wrapping ErrLineTooLong; Next may be called again after it.
// Errors of the underlying reader are returned wrapped, with the file
// name.
func (lr *LineReader) Next() ([]byte, int64, error) {
	for !lr.done {
		line, err := lr.br.ReadSlice('\n')
		tooLong := false
		if errors.Is(err, bufio.ErrBufferFull) {
			tooLong = true
			err = lr.discardRest()
		}
		if err != nil && err != io.EOF {
			hint := ""
			if errors.Is(err, io.ErrUnexpectedEOF) {
				hint = " (the compressed data ends early: the file was cut short)"
			}
			return nil, 0, fmt.Errorf("sparse: reading %s after line %d: %w%s", lr.cfg.Name, lr.lines, err, hint)
		}
		if err == io.EOF {
			lr.done = true
			if len(line) == 0 && !tooLong {
				break // the last line ended with "\n"
			}
		}
		idx := lr.cfg.FirstIndex + lr.lines
		lr.lines++
		if !lr.cfg.Partition.Owns(idx) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if tooLong || len(line) > lr.cfg.MaxLineBytes {
			pe := NewParseError(ErrLineTooLong, nil, "line longer than %d bytes", lr.cfg.MaxLineBytes)
			pe.File, pe.Line = lr.cfg.Name, lr.lines
			return nil, lr.lines, pe
		}
		return line, lr.lines, nil
	}
	return nil, 0, io.EOF
}

// discardRest consumes the rest of an over-long line. It returns io.EOF if
// the stream ends before a newline.
func (lr *LineReader) discardRest() error {
	for {
		_, err := lr.br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// NextExample is the loop every line reader runs: read this worker's next
// line from lr, parse it into ex (parse reports false for a line that holds
// no example, such as a comment), and count it in stats. A malformed line's
// *ParseError gets the file and line number; with skipBad it is skipped and
// counted (and given to onSkip, if set) and the loop goes on. It returns
// io.EOF after the last line.
func NextExample(lr *LineReader, ex *Example, stats *Stats, parse func([]byte, *Example) (bool, error), skipBad bool, onSkip func(*ParseError)) (*Example, error) {
	for {
		line, num, err := lr.Next()
		if err == nil {
			var ok bool
			if ok, err = parse(line, ex); err == nil {
				if !ok {
					continue
				}
				stats.Examples++
				return ex, nil
			}
		}
		var pe *ParseError
		if !errors.As(err, &pe) {
			return nil, err // io.EOF or a read error
		}
		pe.File, pe.Line = lr.Name(), num
		if !skipBad {
			return nil, pe
		}
		stats.Skipped++
		if onSkip != nil {
			onSkip(pe)
		}
	}
}
