package consistency

import (
	"strings"
	"testing"
)

// Only the drop verdicts are "dropped"; the server skips the gradient
// exactly for those.
func TestVerdictDropped(t *testing.T) {
	for v, want := range map[Verdict]bool{
		Apply: false, Accumulate: false, Complete: false,
		DropStale: true, DropDuplicate: true, DropPastGoal: true,
	} {
		if got := v.Dropped(); got != want {
			t.Errorf("%v.Dropped() = %v, want %v", v, got, want)
		}
	}
	if got, want := Verdict(99).String(), "Verdict(99)"; got != want {
		t.Errorf("Verdict(99).String() = %q, want %q", got, want)
	}
}

// Validate's bounds, each side of each limit.
func TestValidateBounds(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		wantErr string // "" for valid
	}{
		{Config{NumWorkers: 1}, ""},
		{Config{NumWorkers: 0}, "need at least one worker, got 0"},
		{Config{Sync: true, NumWorkers: 2, ReplicasToAggregate: 1}, ""},
		{Config{Sync: true, NumWorkers: 2, ReplicasToAggregate: 2}, ""},
		{Config{Sync: true, NumWorkers: 2, ReplicasToAggregate: 0}, "replicas_to_aggregate must be in 1..2"},
		{Config{Sync: true, NumWorkers: 2, ReplicasToAggregate: 3}, "replicas_to_aggregate must be in 1..2"},
		{Config{NumWorkers: 2, ReplicasToAggregate: 0}, ""}, // async ignores it
		{Config{NumWorkers: 1, MaxStaleness: 0}, ""},
		{Config{NumWorkers: 1, MaxStaleness: -1}, "max staleness must be >= 0, got -1"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v: Validate() = %v, want nil", tc.cfg, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%+v: Validate() = %v, want an error containing %q", tc.cfg, err, tc.wantErr)
		}
	}
	if _, err := New(Config{NumWorkers: 0}, 0); err == nil {
		t.Error("New with no worker: no error")
	}
}

// Bounded staleness at the bound: a push exactly MaxStaleness steps old is
// applied, one step older is dropped; a push from the future is applied
// (async has no "ahead" check).
func TestAsyncStalenessBound(t *testing.T) {
	tr, err := New(Config{NumWorkers: 1, MaxStaleness: 3}, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step     int64
		want     Verdict
		wantStep int64
	}{
		{7, Apply, 11},     // 10-7 = 3: at the bound
		{7, DropStale, 11}, // 11-7 = 4: past it
		{8, Apply, 12},     // 11-8 = 3
		{12, Apply, 13},    // current
		{20, Apply, 14},    // ahead: applied
	} {
		v, err := tr.Push(0, tc.step)
		if err != nil || v != tc.want || tr.Step() != tc.wantStep {
			t.Fatalf("push at %d: %v, %v, step %d; want %v, nil, step %d", tc.step, v, err, tr.Step(), tc.want, tc.wantStep)
		}
	}
	if got, want := tr.Stats(), (Stats{Applied: 4, StaleDropped: 1}); got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
	if have, want, missing := tr.Waiting(); have != 0 || want != 0 || missing != nil {
		t.Errorf("async Waiting() = %d, %d, %v; want 0, 0, nil", have, want, missing)
	}
}

// Worker ids at both ends of the range are accepted, one past is not.
func TestPushWorkerRange(t *testing.T) {
	tr, err := New(Config{Sync: true, NumWorkers: 3, ReplicasToAggregate: 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{-1, 3} {
		if _, err := tr.Push(w, 0); err == nil {
			t.Errorf("worker %d: no error", w)
		}
	}
	for _, w := range []int{0, 2} {
		if v, err := tr.Push(w, 0); err != nil || v != Accumulate {
			t.Errorf("worker %d: %v, %v; want accumulate", w, v, err)
		}
	}
	if _, err := tr.Push(1, -1); err == nil {
		t.Error("negative step: no error")
	}
	if have, want, missing := tr.Waiting(); have != 2 || want != 3 || len(missing) != 1 || missing[0] != 1 {
		t.Errorf("Waiting() = %d, %d, %v; want 2, 3, [1]", have, want, missing)
	}
	if tr.Config().NumWorkers != 3 {
		t.Errorf("Config().NumWorkers = %d, want 3", tr.Config().NumWorkers)
	}
}

// ForceComplete ends a partial sync step with the gradients it has, and
// does nothing without any or in async mode.
func TestForceComplete(t *testing.T) {
	tr, err := New(Config{Sync: true, NumWorkers: 3, ReplicasToAggregate: 3}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.ForceComplete(); n != 0 || tr.Step() != 5 {
		t.Fatalf("ForceComplete with none: %d, step %d; want 0, step 5", n, tr.Step())
	}
	tr.Push(0, 5)
	tr.Push(2, 5)
	if n := tr.ForceComplete(); n != 2 || tr.Step() != 6 {
		t.Fatalf("ForceComplete with 2: %d, step %d; want 2, step 6", n, tr.Step())
	}
	// The next step starts empty: every worker may contribute again, and it
	// needs all three.
	if have, _, missing := tr.Waiting(); have != 0 || len(missing) != 3 {
		t.Errorf("after ForceComplete: have %d, missing %v; want 0, [0 1 2]", have, missing)
	}
	for i, w := range []int{0, 2, 1} {
		want := Accumulate
		if i == 2 {
			want = Complete
		}
		if v, err := tr.Push(w, 6); err != nil || v != want {
			t.Errorf("push %d at step 6: %v, %v; want %v", w, v, err, want)
		}
	}
	if n := tr.ForceComplete(); n != 0 || tr.Step() != 7 {
		t.Errorf("ForceComplete on an empty step: %d, step %d; want 0, step 7", n, tr.Step())
	}

	async, _ := New(Config{NumWorkers: 1}, 0)
	async.Push(0, 0)
	if n := async.ForceComplete(); n != 0 || async.Step() != 1 {
		t.Errorf("async ForceComplete: %d, step %d; want 0, step 1", n, async.Step())
	}
}

// SetStep drops a partial sync step: the workers that had contributed may
// contribute again at the new step, and the count starts over.
func TestSetStepDiscardsPartialStep(t *testing.T) {
	tr, err := New(Config{Sync: true, NumWorkers: 2, ReplicasToAggregate: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr.Push(0, 0)
	tr.SetStep(3)
	if tr.Step() != 3 || !tr.Ready(3) || tr.Ready(4) {
		t.Fatalf("after SetStep(3): step %d, Ready(3) %v, Ready(4) %v", tr.Step(), tr.Ready(3), tr.Ready(4))
	}
	if v, err := tr.Push(0, 3); err != nil || v != Accumulate {
		t.Fatalf("worker 0 at step 3: %v, %v; want accumulate (its step-0 push is gone)", v, err)
	}
	if v, err := tr.Push(1, 3); err != nil || v != Complete || tr.Step() != 4 {
		t.Fatalf("worker 1 at step 3: %v, %v, step %d; want complete, step 4", v, err, tr.Step())
	}
}

// With a goal, the shard stops there: async pushes and sync steps past it
// are dropped, counted apart from stale ones, and a new goal (a resumed
// job) lets training go on.
func TestGoalStopsTheShard(t *testing.T) {
	for _, sync := range []bool{false, true} {
		tr, err := New(Config{Sync: sync, NumWorkers: 2, ReplicasToAggregate: 1, Goal: 3}, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if v, err := tr.Push(i%2, tr.Step()); err != nil || v.Dropped() {
				t.Fatalf("sync=%v: push %d below the goal: %v, %v", sync, i, v, err)
			}
		}
		if tr.Step() != 3 {
			t.Fatalf("sync=%v: step %d, want 3", sync, tr.Step())
		}
		for w := range 2 {
			if v, err := tr.Push(w, 3); err != nil || v != DropPastGoal {
				t.Errorf("sync=%v: push at the goal: %v, %v; want %v", sync, v, err, DropPastGoal)
			}
		}
		if st := tr.Stats(); st.PastGoal != 2 || st.StaleDropped != 0 || tr.Step() != 3 {
			t.Errorf("sync=%v: stats %+v at step %d, want 2 past the goal, none stale, step 3", sync, st, tr.Step())
		}
		tr.SetGoal(4)
		if v, err := tr.Push(0, 3); err != nil || v.Dropped() || tr.Step() != 4 {
			t.Errorf("sync=%v: push after the goal moved: %v, %v at step %d", sync, v, err, tr.Step())
		}
	}
	if err := (Config{NumWorkers: 1, Goal: -1}).Validate(); err == nil {
		t.Error("a negative goal validated")
	}
}
