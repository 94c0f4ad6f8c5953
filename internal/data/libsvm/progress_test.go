package libsvm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/progress"
)

// ReadFiles with a Progress logs lines as the files are read (the clock
// here moves 3s at every look, so every read of the files' bytes logs),
// each with rows, MB of the total, a share that grows, a rate and an ETA;
// a last line at the end; and its observer ends with every byte of the
// files (plain and gzipped) and every example.
func TestReadFilesReportsProgress(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b.gz")
	writeRows(t, a, 0, 40000)
	writeRows(t, b, 40000, 40000)
	var size int64
	for _, p := range []string{a, b} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	now := time.Unix(0, 0)
	var lines []string
	var last progress.Update
	m := &progress.Meter{What: "loading", Now: func() time.Time { now = now.Add(3 * time.Second); return now },
		Logf:    func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) },
		Observe: func(u progress.Update) { last = u }}
	ds, st, err := ReadFiles([]string{a, b}, Options{Progress: m})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 80000 || st.Examples != 80000 {
		t.Fatalf("read %d examples (stats %+v), want 80000", ds.Len(), st)
	}
	if !last.Done || last.Bytes != size || last.Total != size || last.Rows != 80000 {
		t.Fatalf("the observer ended with %+v, want done, %d bytes of %d, 80000 rows", last, size, size)
	}
	if len(lines) < 3 {
		t.Fatalf("%d lines, want progress lines and a last one: %q", len(lines), lines)
	}
	line := regexp.MustCompile(`^loading: (\d+) rows, [0-9.]+ [kM]B of [0-9.]+ [kM]B \((\d+)%\), [0-9.]+ [kM]B/s(, ETA [0-9hms]+)?$`)
	prev := -1
	for _, l := range lines[:len(lines)-1] {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("progress line %q does not read like %s", l, line)
		}
		pct, _ := strconv.Atoi(m[2])
		if pct < prev {
			t.Fatalf("share went back from %d%% to %d%%: %q", prev, pct, lines)
		}
		prev = pct
	}
	if prev != 100 {
		t.Fatalf("last progress line at %d%%, want 100%%: %q", prev, lines)
	}
	if done := regexp.MustCompile(`^loading: done: 80000 rows, [0-9.]+ [kM]B in [0-9hms]+ \([0-9.]+ [kM]B/s\)$`); !done.MatchString(lines[len(lines)-1]) {
		t.Fatalf("last line %q does not read like %s", lines[len(lines)-1], done)
	}
}
