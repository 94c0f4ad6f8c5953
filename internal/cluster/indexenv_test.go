package cluster

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"testing"
)

func TestTaskIndexEnv(t *testing.T) {
	base := Flags{PSHosts: "p0:1,p1:1", WorkerHosts: "w0:1,w1:1,w2:1,w3:1", JobName: "worker",
		PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexEnv: "JOB_COMPLETION_INDEX", TaskIndexEnvFound: true}
	for _, tc := range []struct {
		val  string
		want int
	}{
		{"0", 0}, {"3", 3}, {" 2\n", 2},
		{"paramserv-worker-1", 1}, {"paramserv-worker-2.paramserv.default.svc.cluster.local", 2},
	} {
		f := base
		f.TaskIndexEnvValue = tc.val
		c, err := Resolve(f, "")
		if err != nil {
			t.Errorf("value %q: %v", tc.val, err)
			continue
		}
		if c.Task != (Task{"worker", tc.want}) {
			t.Errorf("value %q: task %v, want worker %d", tc.val, c.Task, tc.want)
		}
	}

	// Over TF_CONFIG's index, with a warning, as --task_index does.
	f := base
	f.JobNameSet, f.PSHostsSet, f.WorkerHostsSet = false, false, false
	f.TaskIndexEnvValue = "0"
	c, err := Resolve(f, tfTwoWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if c.Task.Index != 0 || len(c.Warnings) != 1 || c.Warnings[0] != "--task_index_env=JOB_COMPLETION_INDEX (0) overrides TF_CONFIG task.index (task 1 here)" {
		t.Errorf("task %v, warnings %q", c.Task, c.Warnings)
	}
}

func TestTaskIndexEnvErrors(t *testing.T) {
	base := Flags{PSHosts: "p0:1", WorkerHosts: "w0:1,w1:1", JobName: "worker",
		PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexEnv: "JOB_COMPLETION_INDEX", TaskIndexEnvFound: true}
	for _, tc := range []struct {
		name   string
		change func(*Flags)
		source string
		pieces []string
	}{
		{"unset", func(f *Flags) { f.TaskIndexEnvFound = false }, "--task_index_env=JOB_COMPLETION_INDEX",
			[]string{"environment variable JOB_COMPLETION_INDEX is not set", "whole number"}},
		{"not a number", func(f *Flags) { f.TaskIndexEnvValue = "web" }, "--task_index_env=JOB_COMPLETION_INDEX", []string{`$JOB_COMPLETION_INDEX is "web"`}},
		{"negative", func(f *Flags) { f.TaskIndexEnvValue = "-1" }, "--task_index_env=JOB_COMPLETION_INDEX", []string{`"-1"`}},
		{"leading zero", func(f *Flags) { f.TaskIndexEnvValue = "ps-01" }, "--task_index_env=JOB_COMPLETION_INDEX", []string{`"ps-01"`}},
		{"empty", func(f *Flags) { f.TaskIndexEnvValue = "" }, "--task_index_env=JOB_COMPLETION_INDEX", []string{`is ""`}},
		{"out of range", func(f *Flags) { f.TaskIndexEnvValue = "2" }, `--task_index_env=JOB_COMPLETION_INDEX (JOB_COMPLETION_INDEX="2")`,
			[]string{"task index 2 out of range: the worker job has 2 tasks (0..1)"}},
		{"both flags", func(f *Flags) { f.TaskIndexSet = true; f.TaskIndex = 1 }, "--task_index_env",
			[]string{"given together with --task_index=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			tc.change(&f)
			_, err := Resolve(f, "")
			wantErr(t, err, tc.source, tc.pieces...)
		})
	}
}

func TestBindFlagsTaskIndexEnv(t *testing.T) {
	t.Setenv("PARAMSERV_TEST_INDEX", "paramserv-ps-1")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	get := BindFlags(fs)
	if err := fs.Parse([]string{"--task_index_env=PARAMSERV_TEST_INDEX"}); err != nil {
		t.Fatal(err)
	}
	want := Flags{TaskIndexEnv: "PARAMSERV_TEST_INDEX", TaskIndexEnvValue: "paramserv-ps-1", TaskIndexEnvFound: true}
	if got := get(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// FuzzTaskIndexEnv: whatever the variable holds, Resolve does not panic, and
// an index it takes is in range and written in the value.
func FuzzTaskIndexEnv(f *testing.F) {
	for _, s := range []string{"0", "1", "paramserv-ps-1", "w-2.svc.cluster.local", "-1", "", "ps-01", "99999999999999999999", "a-b-", " 1 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, val string) {
		c, err := Resolve(Flags{PSHosts: "p:1", WorkerHosts: "w0:1,w1:1,w2:1", JobName: "worker", PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true,
			TaskIndexEnv: "I", TaskIndexEnvValue: val, TaskIndexEnvFound: true}, "")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: %T %v, want *Error", val, err, err)
			}
			return
		}
		if c.Task.Index < 0 || c.Task.Index > 2 || !strings.Contains(val, strconv.Itoa(c.Task.Index)) {
			t.Fatalf("%q: index %d", val, c.Task.Index)
		}
	})
}
