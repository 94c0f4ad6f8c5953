package trainer

import (
	"strings"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/server"
)

// jobEnd: a ps ends the job when every worker is done, gave up or, the
// goal reached, gone; it waits for a worker that may still come back.
func TestJobEnd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0.Add(time.Minute)
	recent, old := now.Add(-time.Second), now.Add(-goneAfter)
	gave := map[int]server.GaveUp{0: {Why: "--recovery_timeout=5s passed", At: recent}, 1: {Why: "ps 1 gone", At: recent}}
	for _, tc := range []struct {
		name      string
		done      []int
		seen      map[int]time.Time
		gaveUp    map[int]server.GaveUp
		over      bool
		final     bool
		started   time.Time
		ended, ok bool
		how       string
	}{
		{name: "both gave up", seen: map[int]time.Time{0: recent, 1: recent}, gaveUp: gave, started: t0,
			ended: true, how: "worker 0 gave up (--recovery_timeout=5s passed), worker 1 gave up (ps 1 gone)"},
		{name: "one gave up, one training", seen: map[int]time.Time{0: recent, 1: recent}, gaveUp: map[int]server.GaveUp{1: gave[1]}, started: t0},
		{name: "gave up, then back", seen: map[int]time.Time{0: recent.Add(time.Millisecond), 1: recent}, gaveUp: gave, started: t0},
		{name: "silent before the goal", done: []int{0}, seen: map[int]time.Time{0: recent, 1: old}, started: t0},
		{name: "gone after the goal", done: []int{0}, seen: map[int]time.Time{0: recent, 1: old}, over: true, started: t0,
			ended: true, ok: true, how: "worker 0 done, worker 1 gone after the goal (last heard 5s ago)"},
		{name: "chief gone after the goal", done: []int{1}, seen: map[int]time.Time{0: old, 1: recent}, over: true, started: t0,
			ended: true, how: "worker 0 gone after the goal (last heard 5s ago), worker 1 done"},
		{name: "lingering worker heard", done: []int{0}, seen: map[int]time.Time{0: recent, 1: recent}, over: true, started: t0},
		{name: "restored final, nobody yet", over: true, final: true, started: now.Add(-time.Second)},
		{name: "restored final, nobody came", over: true, final: true, started: now.Add(-5 * time.Minute),
			ended: true, ok: true, how: "worker 0 never heard from (the job was over), worker 1 never heard from (the job was over)"},
	} {
		ended, ok, how := jobEnd(2, tc.done, tc.seen, tc.gaveUp, tc.over, tc.final, tc.started, now, 5*time.Minute)
		if ended != tc.ended || ok != tc.ok || (tc.ended && how != tc.how) {
			t.Errorf("%s: ended %v ok %v %q; want %v %v %q", tc.name, ended, ok, how, tc.ended, tc.ok, tc.how)
		}
		if ended && !strings.Contains(how, "worker 1") {
			t.Errorf("%s: %q does not name every worker", tc.name, how)
		}
	}
}
