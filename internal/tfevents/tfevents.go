// Package tfevents writes and reads TensorBoard event files: the scalar
// summaries a chief writes every --save_summaries_steps (loss, steps and
// examples per second, dropped pushes, the final metrics), which
// TensorBoard shows and `paramserv plot` draws.
//
// A file, events.out.tfevents.<unix seconds>.<host>, is a TFRecord file:
// each record is its length (uint64, little-endian), the masked CRC-32C of
// those 8 bytes, the data, and the masked CRC-32C of the data; the data is
// an Event protocol buffer (package tfpb, with TensorFlow's field numbers).
// The first event carries the file version "brain.Event:2"; the others
// carry a Summary of scalars (simple_value) at a global step.
package tfevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/paramserv/paramserv/internal/tfevents/tfpb"
)

// FileVersion is the version line of an event file's first event.
const FileVersion = "brain.Event:2"

// FilePrefix starts the name of every event file.
const FilePrefix = "events.out.tfevents."

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's checksum of b: CRC-32C, rotated right by 15
// bits, plus a constant (so that a CRC of data holding CRCs is not
// degenerate).
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Writer appends events to one event file. Its methods are safe for
// concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	path string
	err  error
}

// Create makes dir if needed and starts a new event file in it, named as
// TensorFlow names them, whose first event is the file version.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("summaries: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	path := filepath.Join(dir, fmt.Sprintf("%s%d.%s", FilePrefix, now.Unix(), host))
	// A second writer in the same second (a restarted chief) gets its own file.
	for i := 1; ; i++ {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		path = filepath.Join(dir, fmt.Sprintf("%s%d.%s.%d", FilePrefix, now.Unix(), host, i))
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("summaries: %w", err)
	}
	w := &Writer{f: f, w: bufio.NewWriter(f), path: path}
	if err := w.write(&tfpb.Event{WallTime: wallTime(now), What: &tfpb.Event_FileVersion{FileVersion: FileVersion}}); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Path is the file's path.
func (w *Writer) Path() string { return w.path }

func wallTime(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Scalars writes one event of the scalars at step, tags in sorted order,
// and flushes it to the file.
func (w *Writer) Scalars(step int64, now time.Time, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for k := range values {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	s := &tfpb.Summary{}
	for _, tag := range tags {
		s.Value = append(s.Value, &tfpb.Summary_Value{Tag: tag, Value: &tfpb.Summary_Value_SimpleValue{SimpleValue: float32(values[tag])}})
	}
	return w.write(&tfpb.Event{WallTime: wallTime(now), Step: step, What: &tfpb.Event_Summary{Summary: s}})
}

// write appends one record and flushes it; after an error every write
// fails with it.
func (w *Writer) write(ev *tfpb.Event) error {
	data, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("summaries: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(head[8:], MaskedCRC(head[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], MaskedCRC(data))
	w.w.Write(head[:])
	w.w.Write(data)
	w.w.Write(tail[:])
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("summaries: writing %s: %w", w.path, err)
	}
	return w.err
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if w.err == nil {
		w.err = errors.New("summaries: writer closed")
	}
	return err
}

// ReadRecords reads a TFRecord stream, checking both CRCs of every record.
// A record cut short at the end (a writer killed mid-write) ends the
// stream without error; a bad CRC is an error naming the record.
func ReadRecords(r io.Reader, each func(data []byte) error) error {
	br := bufio.NewReader(r)
	for n := 0; ; n++ {
		var head [12]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil
			}
			return err
		}
		if got, want := binary.LittleEndian.Uint32(head[8:]), MaskedCRC(head[:8]); got != want {
			return fmt.Errorf("record %d: length CRC %#08x, want %#08x", n, got, want)
		}
		length := binary.LittleEndian.Uint64(head[:8])
		if length > 1<<30 {
			return fmt.Errorf("record %d: length %d is too large", n, length)
		}
		data := make([]byte, length+4)
		if _, err := io.ReadFull(br, data); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil
			}
			return err
		}
		data, crc := data[:length], binary.LittleEndian.Uint32(data[length:])
		if want := MaskedCRC(data); crc != want {
			return fmt.Errorf("record %d: data CRC %#08x, want %#08x", n, crc, want)
		}
		if err := each(data); err != nil {
			return fmt.Errorf("record %d: %w", n, err)
		}
	}
}

// ReadFile returns the events of one event file.
func ReadFile(path string) ([]*tfpb.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*tfpb.Event
	err = ReadRecords(f, func(data []byte) error {
		ev := &tfpb.Event{}
		if err := proto.Unmarshal(data, ev); err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// Point is one value of a scalar series.
type Point struct {
	Step  int64
	Value float64
}

// Files lists the event files of dir, oldest first (by name, which starts
// with the time they were created).
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasPrefix(e.Name(), FilePrefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadScalars returns the scalar series of every event file of dir, by
// tag, in the order written. A step written again (a chief restarted
// from a checkpoint goes over steps again) replaces the earlier value and
// drops the points after it, as TensorBoard does with a restart.
func ReadScalars(dir string) (map[string][]Point, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no event files (%s*)", dir, FilePrefix)
	}
	out := map[string][]Point{}
	for _, path := range files {
		evs, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			for _, v := range ev.GetSummary().GetValue() {
				sv, ok := v.Value.(*tfpb.Summary_Value_SimpleValue)
				if !ok {
					continue
				}
				pts := out[v.Tag]
				for len(pts) > 0 && pts[len(pts)-1].Step >= ev.Step {
					pts = pts[:len(pts)-1]
				}
				out[v.Tag] = append(pts, Point{Step: ev.Step, Value: float64(sv.SimpleValue)})
			}
		}
	}
	return out, nil
}
