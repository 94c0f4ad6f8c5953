package tfevents

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/paramserv/paramserv/internal/lifecycle"
)

// TestMaskedCRC checks the mask against CRC-32C's published check value
// (crc32c("123456789") = 0xE3069283), masked by hand as TFRecord says:
// rotate right by 15 bits, add 0xa282ead8.
func TestMaskedCRC(t *testing.T) {
	if c := crc32.Checksum([]byte("123456789"), castagnoli); c != 0xE3069283 {
		t.Fatalf("crc32c check value %#x", c)
	}
	want := uint32((0xE3069283>>15|0xE3069283<<17)&0xffffffff) + 0xa282ead8
	if got := MaskedCRC([]byte("123456789")); got != want {
		t.Errorf("MaskedCRC = %#08x, want %#08x", got, want)
	}
}

// rawRecords splits a TFRecord file by hand, checking both CRCs with
// hash/crc32 directly.
func rawRecords(t *testing.T, b []byte) [][]byte {
	t.Helper()
	mask := func(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d trailing bytes", len(b))
		}
		n := binary.LittleEndian.Uint64(b)
		if got, want := binary.LittleEndian.Uint32(b[8:]), mask(crc32.Checksum(b[:8], crc32.MakeTable(crc32.Castagnoli))); got != want {
			t.Fatalf("length CRC %#x, want %#x", got, want)
		}
		data := b[12 : 12+n]
		if got, want := binary.LittleEndian.Uint32(b[12+n:]), mask(crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))); got != want {
			t.Fatalf("data CRC %#x, want %#x", got, want)
		}
		out = append(out, data)
		b = b[16+n:]
	}
	return out
}

// field finds the first field num of a protobuf message, by TensorFlow's
// numbering, without the generated code.
func field(t *testing.T, msg []byte, num protowire.Number) (protowire.Type, []byte) {
	t.Helper()
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			t.Fatal("bad tag")
		}
		msg = msg[l:]
		vl := protowire.ConsumeFieldValue(n, typ, msg)
		if vl < 0 {
			t.Fatal("bad value")
		}
		if n == num {
			return typ, msg[:vl]
		}
		msg = msg[vl:]
	}
	return 0, nil
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1700000000, 500e6)
	w, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(100, now.Add(time.Second), map[string]float64{"loss": 0.25, "global_step/sec": 50}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(w.Path()), "events.out.tfevents.1700000000.") {
		t.Errorf("file %s, want events.out.tfevents.<unix seconds>.<host>", w.Path())
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	// By hand, with TensorFlow's field numbers: Event.wall_time 1
	// (double), step 2, file_version 3, summary 5; Summary.value 1;
	// Value.tag 1, simple_value 2 (float).
	recs := rawRecords(t, b)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	if typ, v := field(t, recs[0], 3); typ != protowire.BytesType || string(v[1:]) != FileVersion {
		t.Errorf("first event's file_version %q", v)
	}
	if _, v := field(t, recs[0], 1); math.Float64frombits(binary.LittleEndian.Uint64(v)) != 1700000000.5 {
		t.Errorf("wall_time %x", v)
	}
	if _, v := field(t, recs[1], 2); v[0] != 100 {
		t.Errorf("step %x, want 100", v)
	}
	_, sum := field(t, recs[1], 5)
	_, val := field(t, sum[1:], 1) // the first value: tags are sorted
	val = val[1:]
	if _, tag := field(t, val, 1); string(tag[1:]) != "global_step/sec" {
		t.Errorf("first tag %q", tag[1:])
	}
	if typ, f := field(t, val, 2); typ != protowire.Fixed32Type || math.Float32frombits(binary.LittleEndian.Uint32(f)) != 50 {
		t.Errorf("simple_value %x", f)
	}

	// The package's own reader agrees, and names a damaged record.
	evs, err := ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].GetFileVersion() != FileVersion || evs[1].GetSummary().GetValue()[1].GetSimpleValue() != 0.25 {
		t.Errorf("read %v", evs)
	}
	b[len(b)-6] ^= 1
	bad := filepath.Join(dir, "events.out.tfevents.1.bad")
	os.WriteFile(bad, b, 0o644)
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), "record 1: data CRC") {
		t.Errorf("damaged file read: %v, want a data CRC error of record 1", err)
	}
	// A record cut short (a writer killed mid-write) ends the file.
	os.WriteFile(bad, b[:len(b)-3], 0o644)
	if evs, err := ReadFile(bad); err != nil || len(evs) != 1 {
		t.Errorf("truncated file: %d events, %v; want the first one", len(evs), err)
	}
}

func TestSummariesEveryNSteps(t *testing.T) {
	dir := t.TempDir()
	clock := time.Unix(1700000000, 0)
	w, err := Create(dir, clock)
	if err != nil {
		t.Fatal(err)
	}
	s := &Summaries{W: w, Every: 100, ExamplesPerStep: 50, Now: func() time.Time { return clock },
		Rate: func(step int64) float64 { return 1 / float64(1+step) }}
	for step := int64(1); step <= 1000; step += 2 { // two workers: the chief sees every other step
		clock = clock.Add(10 * time.Millisecond)
		s.Step(lifecycle.StepStats{GlobalStep: step, Loss: 1 / float64(step), Dropped: step%10 == 1})
	}
	s.Validated(500, map[string]float64{"val_accuracy": 0.9})
	s.Final(1000, map[string]float64{"test_accuracy": 0.97})
	w.Close()
	got, err := ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	loss := got["loss"]
	if len(loss) != 9 || loss[0].Step != 101 || loss[8].Step != 901 {
		t.Fatalf("loss at %v, want steps 101, 201, ..., 901", loss)
	}
	if math.Abs(loss[0].Value-1.0/101) > 1e-6 {
		t.Errorf("loss %g at step 101", loss[0].Value)
	}
	for _, p := range got["global_step/sec"] {
		if math.Abs(p.Value-200) > 1e-3 { // 2 steps per 10ms
			t.Errorf("global_step/sec %g at %d, want 200", p.Value, p.Step)
		}
	}
	if ex := got["examples/sec"]; len(ex) != 9 || math.Abs(ex[0].Value-200*50) > 0.1 {
		t.Errorf("examples/sec %v, want 10000", ex)
	}
	if r := got["learning_rate"]; len(r) != 9 || math.Abs(r[8].Value-1.0/902) > 1e-9 {
		t.Errorf("learning_rate %v, want 1/902 at step 901", r)
	}
	if d := got["dropped_pushes"]; len(d) != 9 || d[8].Value != 91 {
		t.Errorf("dropped_pushes %v, want 91 at the last", d)
	}
	if v := got["validation/val_accuracy"]; len(v) != 1 || v[0].Step != 500 || math.Abs(v[0].Value-0.9) > 1e-6 {
		t.Errorf("validation/val_accuracy %v, want 0.9 at step 500", v)
	}
	if a := got["eval/test_accuracy"]; len(a) != 1 || a[0].Step != 1000 || math.Abs(a[0].Value-0.97) > 1e-6 {
		t.Errorf("eval/test_accuracy %v", a)
	}
}

// A chief restarted from a checkpoint writes a new file and goes over
// steps again: the later values win.
func TestReadScalarsRestart(t *testing.T) {
	dir := t.TempDir()
	w1, _ := Create(dir, time.Unix(100, 0))
	for _, st := range []int64{100, 200, 300} {
		w1.Scalars(st, time.Unix(100, 0), map[string]float64{"loss": 1})
	}
	w1.Close()
	w2, _ := Create(dir, time.Unix(200, 0))
	for _, st := range []int64{200, 300, 400} {
		w2.Scalars(st, time.Unix(200, 0), map[string]float64{"loss": 2})
	}
	w2.Close()
	got, err := ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{{100, 1}, {200, 2}, {300, 2}, {400, 2}}
	if len(got["loss"]) != len(want) {
		t.Fatalf("loss %v, want %v", got["loss"], want)
	}
	for i, p := range got["loss"] {
		if p != want[i] {
			t.Errorf("loss %v, want %v", got["loss"], want)
			break
		}
	}
}

// A program's own loop (ExamplesPerStep 0): no loss is written while the
// program reports none (NaN), and examples/sec counts the examples its
// steps carry.
func TestSummariesOfAnOwnLoop(t *testing.T) {
	dir := t.TempDir()
	clock := time.Unix(1700000000, 0)
	w, err := Create(dir, clock)
	if err != nil {
		t.Fatal(err)
	}
	s := &Summaries{W: w, Every: 10, Now: func() time.Time { return clock }}
	for step := int64(1); step <= 40; step++ {
		clock = clock.Add(100 * time.Millisecond)
		loss := math.NaN()
		if step > 20 {
			loss = 2
		}
		s.Step(lifecycle.StepStats{GlobalStep: step, Loss: loss, Examples: 8})
	}
	w.Close()
	got, err := ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l := got["loss"]; len(l) != 2 || l[0].Step != 30 || l[0].Value != 2 {
		t.Errorf("loss %v, want 2 at steps 30 and 40 only (none reported before step 21)", l)
	}
	if ex := got["examples/sec"]; len(ex) != 4 || math.Abs(ex[0].Value-80) > 1e-6 {
		t.Errorf("examples/sec %v, want 80 (8 per step, 10 steps a second)", ex)
	}
}
