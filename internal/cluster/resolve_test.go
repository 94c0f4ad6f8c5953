package cluster

import (
	"flag"
	"reflect"
	"strings"
	"testing"
)

// tfTwoWorkers has ps p0,p1 and workers w0,w1; this task is worker 1.
const tfTwoWorkers = `{"cluster":{"ps":["p0:1","p1:1"],"worker":["w0:1","w1:1"]},"task":{"type":"worker","index":1}}`

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    Flags
		tfConfig string
		want     Config
	}{
		{
			name: "flags only",
			flags: Flags{PSHosts: "p0:2222,p1:2222", WorkerHosts: "w0:2222,w1:2222", JobName: "worker", TaskIndex: 1,
				PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexSet: true},
			want: Config{Spec: Spec{PS: []string{"p0:2222", "p1:2222"}, Workers: []string{"w0:2222", "w1:2222"}}, Task: Task{"worker", 1}},
		},
		{
			name:  "flags, index left at its default",
			flags: Flags{PSHosts: "p:1", WorkerHosts: "w:1", JobName: "ps", PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true},
			want:  Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w:1"}}, Task: Task{"ps", 0}},
		},
		{
			name:  "flag defaults used when nothing else",
			flags: Flags{PSHosts: "p:1", WorkerHosts: "w:1", JobName: "worker", TaskIndex: 0},
			want:  Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w:1"}}, Task: Task{"worker", 0}},
		},
		{
			name:     "TF_CONFIG only",
			tfConfig: tfTwoWorkers,
			want:     Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 1}},
		},
		{
			name:     "TF_CONFIG beats flag defaults",
			flags:    Flags{PSHosts: "x:1", WorkerHosts: "y:1", JobName: "ps", TaskIndex: 0},
			tfConfig: tfTwoWorkers,
			want:     Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 1}},
		},
		{
			name:     "--ps_hosts over cluster.ps",
			flags:    Flags{PSHosts: "x:1", PSHostsSet: true},
			tfConfig: tfTwoWorkers,
			want: Config{Spec: Spec{PS: []string{"x:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 1},
				Warnings: []string{"--ps_hosts overrides TF_CONFIG cluster.ps"}},
		},
		{
			name:     "--worker_hosts over cluster.worker",
			flags:    Flags{WorkerHosts: "x:1,y:1,z:1", WorkerHostsSet: true},
			tfConfig: tfTwoWorkers,
			want: Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"x:1", "y:1", "z:1"}}, Task: Task{"worker", 1},
				Warnings: []string{"--worker_hosts overrides TF_CONFIG cluster.worker"}},
		},
		{
			name:     "--job_name over task.type",
			flags:    Flags{JobName: "ps", JobNameSet: true},
			tfConfig: tfTwoWorkers,
			want: Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"ps", 1},
				Warnings: []string{"--job_name=ps overrides TF_CONFIG task.type (worker)"}},
		},
		{
			name:     "--task_index over task.index",
			flags:    Flags{TaskIndex: 0, TaskIndexSet: true},
			tfConfig: tfTwoWorkers,
			want: Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 0},
				Warnings: []string{"--task_index=0 overrides TF_CONFIG task.index (task 1 here)"}},
		},
		{
			name: "flags equal to TF_CONFIG: no warnings",
			flags: Flags{PSHosts: "p0:1,p1:1", WorkerHosts: "w0:1,w1:1", JobName: "worker", TaskIndex: 1,
				PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexSet: true},
			tfConfig: tfTwoWorkers,
			want:     Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 1}},
		},
		{
			name:     "TF_CONFIG cluster, flags task",
			flags:    Flags{JobName: "ps", TaskIndex: 1, JobNameSet: true, TaskIndexSet: true},
			tfConfig: `{"cluster":{"ps":["p0:1","p1:1"],"worker":["w0:1"]}}`,
			want:     Config{Spec: Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1"}}, Task: Task{"ps", 1}},
		},
		{
			name:     "flags cluster, TF_CONFIG task",
			flags:    Flags{PSHosts: "p:1", WorkerHosts: "w0:1,w1:1", PSHostsSet: true, WorkerHostsSet: true},
			tfConfig: `{"task":{"type":"worker","index":1}}`,
			want:     Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w0:1", "w1:1"}}, Task: Task{"worker", 1}},
		},
		{
			name:     "chief is worker 0",
			tfConfig: tfChief,
			want: Config{Spec: Spec{PS: []string{"ps-0:2222"}, Workers: []string{"chief-0:2222", "worker-0:2222", "worker-1:2222"}},
				Task: Task{"worker", 0}},
		},
		{
			name:     "worker 1 follows the chief",
			tfConfig: tfChiefW1,
			want: Config{Spec: Spec{PS: []string{"ps-0:2222"}, Workers: []string{"chief-0:2222", "worker-0:2222", "worker-1:2222"}},
				Task: Task{"worker", 2}},
		},
		{
			name:     "master",
			tfConfig: tfMaster,
			want:     Config{Spec: Spec{PS: []string{"ps-0:2222"}, Workers: []string{"master-0:2222", "worker-0:2222"}}, Task: Task{"worker", 0}},
		},
		{
			name:     "--worker_hosts replaces chief and workers; --task_index in paramserv numbering",
			flags:    Flags{WorkerHosts: "a:1,b:1", TaskIndex: 1, WorkerHostsSet: true, TaskIndexSet: true},
			tfConfig: tfChief,
			want: Config{Spec: Spec{PS: []string{"ps-0:2222"}, Workers: []string{"a:1", "b:1"}}, Task: Task{"worker", 1},
				Warnings: []string{
					"--worker_hosts overrides TF_CONFIG cluster.chief and cluster.worker",
					"--task_index=1 overrides TF_CONFIG task.index (task 0 here)",
				}},
		},
		{
			name:     "evaluator warning",
			tfConfig: tfEval,
			want: Config{Spec: Spec{PS: []string{"p:2222"}, Workers: []string{"c:2222", "w:2222"}}, Task: Task{"worker", 1},
				Warnings: []string{"TF_CONFIG cluster.evaluator ignored: paramserv runs no evaluator job"}},
		},
		{
			name:     "IPv6 from TF_CONFIG",
			tfConfig: tfIPv6,
			want:     Config{Spec: Spec{PS: []string{"[::1]:2222"}, Workers: []string{"[::1]:2223", "[fe80::1%eth0]:2224"}}, Task: Task{"worker", 1}},
		},
		{
			name: "IPv6 from flags",
			flags: Flags{PSHosts: "[::1]:2222", WorkerHosts: "[::1]:2223,127.0.0.1:2223", JobName: "worker", TaskIndex: 1,
				PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexSet: true},
			want: Config{Spec: Spec{PS: []string{"[::1]:2222"}, Workers: []string{"[::1]:2223", "127.0.0.1:2223"}}, Task: Task{"worker", 1}},
		},
		{
			name:     "blank TF_CONFIG is unset",
			flags:    Flags{PSHosts: "p:1", WorkerHosts: "w:1", JobName: "ps"},
			tfConfig: " \n",
			want:     Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w:1"}}, Task: Task{"ps", 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.flags, tc.tfConfig)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if len(got.From.PS) != len(got.Spec.PS) || len(got.From.Workers) != len(got.Spec.Workers) {
				t.Errorf("From %+v does not match Spec %+v", got.From, got.Spec)
			}
			got.From = Spec{} // TestNeedsFrom checks it
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Resolve\n got %+v\nwant %+v", got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate of a resolved Config: %v", err)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	all := Flags{PSHosts: "p:1", WorkerHosts: "w0:1,w1:1", JobName: "worker", TaskIndex: 0,
		PSHostsSet: true, WorkerHostsSet: true, JobNameSet: true, TaskIndexSet: true}
	with := func(change func(*Flags)) Flags { f := all; change(&f); return f }
	for _, tc := range []struct {
		name     string
		flags    Flags
		tfConfig string
		source   string
		pieces   []string
	}{
		{"no ps", with(func(f *Flags) { f.PSHosts, f.PSHostsSet = "", false }), "", "--ps_hosts",
			[]string{"no ps hosts", "set --ps_hosts", "TF_CONFIG cluster.ps"}},
		{"no workers", with(func(f *Flags) { f.WorkerHosts, f.WorkerHostsSet = "", false }), `{"cluster":{"ps":["q:1"]}}`, "--worker_hosts",
			[]string{"no worker hosts", "set --worker_hosts", "TF_CONFIG cluster.worker"}},
		{"no job", with(func(f *Flags) { f.JobName, f.JobNameSet = "", false }), "", "--job_name",
			[]string{"no job name", "set --job_name", "TF_CONFIG task.type"}},
		{"explicit empty --ps_hosts", with(func(f *Flags) { f.PSHosts = "" }), tfTwoWorkers, "--ps_hosts",
			[]string{"empty list", "127.0.0.1:2222"}},
		{"trailing comma", with(func(f *Flags) { f.WorkerHosts = "w0:1,w1:1," }), "", "--worker_hosts",
			[]string{"entry 3 of 3 is empty"}},
		{"not host:port", with(func(f *Flags) { f.PSHosts = "p:1,localhost" }), "", "--ps_hosts",
			[]string{`entry 2 "localhost" is not host:port`, "want e.g. 127.0.0.1:2222"}},
		{"bad default", Flags{PSHosts: "p", WorkerHosts: "w:1", JobName: "ps"}, "", "--ps_hosts (default)",
			[]string{`entry 1 "p" is not host:port`}},
		{"empty ps list in TF_CONFIG", with(func(f *Flags) { f.PSHostsSet = false }), `{"cluster":{"ps":[]}}`, "TF_CONFIG cluster.ps",
			[]string{"no ps hosts", "at least one"}},
		{"duplicate across jobs", with(func(f *Flags) { f.WorkerHosts = "w0:1,p:1" }), "", "cluster",
			[]string{"ps task 0 (--ps_hosts) and worker task 1 (--worker_hosts)", `"p:1"`, "distinct"}},
		{"duplicate across sources", with(func(f *Flags) { f.PSHostsSet = false }), `{"cluster":{"ps":["w1:1"]}}`, "cluster",
			[]string{"ps task 0 (TF_CONFIG cluster.ps) and worker task 1 (--worker_hosts)"}},
		{"duplicate within TF_CONFIG", Flags{}, `{"cluster":{"ps":["a:1"],"worker":["b:1","B:1"]},"task":{"type":"ps"}}`, "cluster",
			[]string{"worker task 0", "worker task 1", `"B:1"`}},
		{"duplicate IPv6 spelled twice", with(func(f *Flags) { f.PSHosts = "[::1]:2"; f.WorkerHosts = "[0::1]:2" }), "", "cluster",
			[]string{`at "[::1]:2"`, `at "[0::1]:2" are the same address`}},
		{"localhost and 127.0.0.1", with(func(f *Flags) { f.PSHosts = "127.0.0.1:2"; f.WorkerHosts = "localhost:2" }), "", "cluster",
			[]string{`at "127.0.0.1:2"`, `at "localhost:2" are the same address`}},
		{"bad job", with(func(f *Flags) { f.JobName = "master" }), "", "--job_name",
			[]string{`"master" is not a job`, `want "ps" or "worker"`, "--job_name=worker --task_index=0"}},
		{"upper-case job", with(func(f *Flags) { f.JobName = "PS" }), "", "--job_name",
			[]string{`"PS" is not a job`, "lower case"}},
		{"index out of range", with(func(f *Flags) { f.TaskIndex = 3 }), "", "--task_index",
			[]string{"task index 3 out of range: the worker job has 2 tasks (0..1)"}},
		{"index out of range, one task", with(func(f *Flags) { f.JobName = "ps"; f.TaskIndex = 1 }), "", "--task_index",
			[]string{"the ps job has 1 task (0..0)"}},
		{"negative index", with(func(f *Flags) { f.TaskIndex = -1 }), "", "--task_index",
			[]string{"task index -1 is negative", "0..1"}},
		{"TF_CONFIG index out of range", Flags{}, `{"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"worker","index":1}}`, "TF_CONFIG task.index",
			[]string{"task index 1 out of range: the worker job has 1 task (0..0)"}},
		{"TF_CONFIG index out of range after chief", Flags{}, `{"cluster":{"chief":["c:1"],"ps":["p:1"],"worker":["w:1"]},"task":{"type":"worker","index":1}}`, "TF_CONFIG task.index",
			[]string{"task index 2 out of range: the worker job has 2 tasks (0..1)", "TF_CONFIG worker 1 is worker 2 here"}},
		{"flag job makes TF_CONFIG index out of range", with(func(f *Flags) { f.JobName = "ps"; f.TaskIndexSet = false }), tfTwoWorkers, "TF_CONFIG task.index",
			[]string{"task index 1 out of range: the ps job has 1 task"}},
		{"bad TF_CONFIG even when flags give all", all, `{"cluster":`, "TF_CONFIG",
			[]string{"invalid JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(tc.flags, tc.tfConfig)
			wantErr(t, err, tc.source, tc.pieces...)
		})
	}
}

func TestConfigMethods(t *testing.T) {
	spec := Spec{PS: []string{"p0:1", "p1:1"}, Workers: []string{"w0:1", "w1:1"}}
	for _, tc := range []struct {
		task  Task
		addr  string
		chief bool
	}{
		{Task{"worker", 0}, "w0:1", true},
		{Task{"worker", 1}, "w1:1", false},
		{Task{"ps", 0}, "p0:1", false},
		{Task{"ps", 1}, "p1:1", false},
		{Task{"ps", 2}, "", false},
		{Task{"chief", 0}, "", false},
	} {
		c := Config{Spec: spec, Task: tc.task}
		if got := c.Addr(); got != tc.addr {
			t.Errorf("%v: Addr() = %q, want %q", tc.task, got, tc.addr)
		}
		if got := c.IsChief(); got != tc.chief {
			t.Errorf("%v: IsChief() = %v, want %v", tc.task, got, tc.chief)
		}
	}
	if got := (Task{"worker", 3}).String(); got != "/job:worker/task:3" {
		t.Errorf("Task.String() = %q", got)
	}
}

func TestValidate(t *testing.T) {
	good := Config{Spec: Spec{PS: []string{"p:1"}, Workers: []string{"w:1"}}, Task: Task{"worker", 0}}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", good, err)
	}
	for _, tc := range []struct {
		name   string
		c      Config
		source string
		piece  string
	}{
		{"no ps", Config{Spec: Spec{Workers: []string{"w:1"}}, Task: Task{"worker", 0}}, "Spec.PS", "no ps hosts"},
		{"bad host", Config{Spec: Spec{PS: []string{"p"}, Workers: []string{"w:1"}}, Task: Task{"worker", 0}}, "Spec.PS", `ps task 0: "p" is not host:port`},
		{"dup", Config{Spec: Spec{PS: []string{"w:1"}, Workers: []string{"w:1"}}, Task: Task{"worker", 0}}, "cluster", "both have address"},
		{"job", Config{Spec: good.Spec, Task: Task{"", 0}}, "Task.Job", `"" is not a job`},
		{"index", Config{Spec: good.Spec, Task: Task{"ps", 1}}, "Task.Index", "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.c.Validate(), tc.source, tc.piece) })
	}
}

func TestBindFlags(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	get := BindFlags(fs)
	if err := fs.Parse([]string{"--ps_hosts=p:1", "-task_index", "2"}); err != nil {
		t.Fatal(err)
	}
	want := Flags{PSHosts: "p:1", TaskIndex: 2, PSHostsSet: true, TaskIndexSet: true}
	if got := get(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, name := range []string{"ps_hosts", "worker_hosts", "job_name", "task_index", "TF_CONFIG"} {
		if !strings.Contains(help.String(), name) {
			t.Errorf("flag help does not mention %s:\n%s", name, help.String())
		}
	}
}
