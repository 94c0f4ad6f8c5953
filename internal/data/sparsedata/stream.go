package sparsedata

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
)

// StreamConfig configures a Stream.
type StreamConfig struct {
	// Paths are the files, read in order each pass (".gz" decompressed);
	// Open makes their Sources (packages libsvm and criteo give one).
	Paths []string
	Open  Opener
	// Epochs is the number of passes over the files; 0 means no end.
	Epochs int
	// ShuffleBuffer is the number of rows held for shuffling: each row
	// returned is drawn at random from the buffer and replaced by the next
	// row read. 0 or 1 returns the rows in file order.
	ShuffleBuffer int
	// Seed seeds the shuffle.
	Seed uint64
	// ChunkRows (default 512) is how many rows the reader hands over at a
	// time, and ReadAhead (default 4) how many such chunks it reads ahead.
	ChunkRows, ReadAhead int
}

// Stream reads examples from files in a background goroutine (parsing
// overlapped with the consumer's work) and returns them shuffled within a
// bounded buffer, over a number of passes. It holds at most
// ShuffleBuffer + (ReadAhead+2)·ChunkRows rows at a time, however large the
// files. A Stream is used by one goroutine at a time; Close stops the
// reader.
type Stream struct {
	cfg   StreamConfig
	ch    chan streamChunk
	free  chan *Dataset // the pool of ReadAhead+2 chunks not in flight
	done  chan struct{}
	close sync.Once
	wg    sync.WaitGroup
	rng   *rand.Rand

	in    *Dataset // the chunk being consumed
	inPos int
	err   error // the reader's error, returned once the rows before it are out
	eof   bool

	buf []Example // the shuffle buffer; its slices are reused
	out Example   // returned by Next

	held, maxHeld atomic.Int64 // rows in chunks and buffer
	epoch         atomic.Int64 // passes the reader has finished
}

// InputError is an error of the files a Stream reads, as Next returns it:
// one that cannot be opened, a malformed line (a *ParseError, wrapped), a
// damaged gzip stream, files with no example. It is the data's to fix, as
// the same error found while loading the files before training is; its
// message is the wrapped error's.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap returns the error of the files.
func (e *InputError) Unwrap() error { return e.Err }

type streamChunk struct {
	d   *Dataset
	err error
}

// NewStream starts reading. It fails only on a configuration error; errors
// of the files come from Next.
func NewStream(cfg StreamConfig) (*Stream, error) {
	if len(cfg.Paths) == 0 || cfg.Open == nil {
		return nil, errors.New("sparse: a stream needs files and an opener")
	}
	if cfg.Epochs < 0 || cfg.ShuffleBuffer < 0 {
		return nil, fmt.Errorf("sparse: stream: epochs (%d) and shuffle buffer (%d) must not be negative", cfg.Epochs, cfg.ShuffleBuffer)
	}
	if cfg.ShuffleBuffer == 0 {
		cfg.ShuffleBuffer = 1
	}
	if cfg.ChunkRows <= 0 {
		cfg.ChunkRows = 512
	}
	if cfg.ReadAhead <= 0 {
		cfg.ReadAhead = 4
	}
	s := &Stream{
		cfg:  cfg,
		ch:   make(chan streamChunk, cfg.ReadAhead),
		free: make(chan *Dataset, cfg.ReadAhead+2),
		done: make(chan struct{}),
		rng:  rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		buf:  make([]Example, 0, min(cfg.ShuffleBuffer, 1<<16)),
	}
	for range cfg.ReadAhead + 2 {
		s.free <- &Dataset{}
	}
	s.wg.Add(1)
	go s.read()
	return s, nil
}

// Close stops the background reader and waits for it.
func (s *Stream) Close() {
	s.close.Do(func() { close(s.done) })
	s.wg.Wait()
}

// MaxHeld is the largest number of rows the stream has held at once
// (read ahead and in the shuffle buffer).
func (s *Stream) MaxHeld() int64 { return s.maxHeld.Load() }

// Epochs is the number of passes the reader has finished.
func (s *Stream) Epochs() int64 { return s.epoch.Load() }

func (s *Stream) addHeld(n int64) {
	h := s.held.Add(n)
	for {
		m := s.maxHeld.Load()
		if h <= m || s.maxHeld.CompareAndSwap(m, h) {
			return
		}
	}
}

// read is the background reader: it parses the files pass after pass into
// chunks of ChunkRows rows.
func (s *Stream) read() {
	defer s.wg.Done()
	defer close(s.ch)
	send := func(c streamChunk) bool {
		if c.d != nil {
			s.addHeld(int64(c.d.Len()))
		}
		select {
		case s.ch <- c:
			return true
		case <-s.done:
			return false
		}
	}
	for pass := 0; s.cfg.Epochs == 0 || pass < s.cfg.Epochs; pass++ {
		d := s.chunk()
		if d == nil {
			return
		}
		var lines, rows int64
		for _, p := range s.cfg.Paths {
			f, r, err := openFile(p)
			if err != nil {
				send(streamChunk{d: d, err: &InputError{err}})
				return
			}
			src, err := s.cfg.Open(r, p, lines)
			for err == nil {
				var ex *Example
				ex, err = src.Next()
				if err != nil {
					break
				}
				d.Append(ex)
				rows++
				if d.Len() >= s.cfg.ChunkRows {
					if !send(streamChunk{d: d}) {
						f.Close()
						return
					}
					if d = s.chunk(); d == nil {
						f.Close()
						return
					}
				}
			}
			f.Close()
			if err != nil && err != io.EOF {
				send(streamChunk{d: d, err: &InputError{err}})
				return
			}
			lines += src.Stats().Lines
		}
		if rows == 0 {
			send(streamChunk{d: d, err: &InputError{fmt.Errorf("sparse: no examples for this worker in %s", strings.Join(s.cfg.Paths, ", "))}})
			return
		}
		if d.Len() > 0 && !send(streamChunk{d: d}) {
			return
		}
		s.epoch.Add(1)
	}
}

// chunk waits for an empty chunk of the pool (nil once the stream is
// closed): the reader reads ahead by at most the pool, and the stream's
// memory settles at a fixed set of chunks.
func (s *Stream) chunk() *Dataset {
	select {
	case d := <-s.free:
		d.Labels, d.Offsets, d.Keys, d.Vals = d.Labels[:0], d.Offsets[:0], d.Keys[:0], d.Vals[:0]
		return d
	case <-s.done:
		return nil
	}
}

// pull moves the next row read into dst, reusing dst's slices. It returns
// false at the end of the data or on the reader's error (in s.err).
func (s *Stream) pull(dst *Example) bool {
	for s.in == nil || s.inPos == s.in.Len() {
		if s.in != nil {
			s.addHeld(-int64(s.in.Len()))
			s.free <- s.in // never blocks: the pool's chunks fit
			s.in = nil
		}
		if s.eof || s.err != nil {
			return false
		}
		c, ok := <-s.ch
		if !ok {
			s.eof = true
			return false
		}
		s.in, s.inPos, s.err = c.d, 0, c.err
	}
	ex := s.in.At(s.inPos)
	s.inPos++
	dst.Label = ex.Label
	dst.Keys = append(dst.Keys[:0], ex.Keys...)
	dst.Vals = append(dst.Vals[:0], ex.Vals...)
	return true
}

// Next returns the next example, or io.EOF after the last pass, or the
// first error of the files, an *InputError (wrapping a *ParseError that
// names file:line for a malformed line). The example is
// valid until the next call.
func (s *Stream) Next() (*Example, error) {
	for len(s.buf) < s.cfg.ShuffleBuffer {
		if len(s.buf) < cap(s.buf) {
			s.buf = s.buf[:len(s.buf)+1] // reuse the slot's slices
		} else {
			s.buf = append(s.buf, Example{})
		}
		if !s.pull(&s.buf[len(s.buf)-1]) {
			s.buf = s.buf[:len(s.buf)-1]
			break
		}
		s.addHeld(1)
	}
	if len(s.buf) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	if s.err != nil && (s.in == nil || s.inPos == s.in.Len()) {
		// The reader has reached its error: report it now rather than
		// after the buffer drains.
		return nil, s.err
	}
	j := 0
	if len(s.buf) > 1 {
		j = s.rng.IntN(len(s.buf))
	}
	s.out, s.buf[j] = s.buf[j], s.out
	if s.pull(&s.buf[j]) {
		return &s.out, nil
	}
	last := len(s.buf) - 1
	s.buf[j], s.buf[last] = s.buf[last], s.buf[j]
	s.buf = s.buf[:last]
	s.addHeld(-1)
	return &s.out, nil
}
