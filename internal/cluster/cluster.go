package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Job names.
const (
	JobPS     = "ps"
	JobWorker = "worker"
)

// Spec lists the host:port addresses of every task. Index i of a list is
// task i of that job; Workers[0] is the chief.
type Spec struct {
	PS      []string
	Workers []string
}

// Hosts returns the addresses of the named job, or nil for a name other than
// "ps" or "worker".
func (s Spec) Hosts(job string) []string {
	switch job {
	case JobPS:
		return s.PS
	case JobWorker:
		return s.Workers
	}
	return nil
}

// Task is this process's role.
type Task struct {
	Job   string // "ps" or "worker"
	Index int    // 0-based, within Job
}

// String returns the task in TensorFlow's device-name form,
// "/job:worker/task:1".
func (t Task) String() string { return fmt.Sprintf("/job:%s/task:%d", t.Job, t.Index) }

// Config is a validated cluster and this process's place in it.
type Config struct {
	Spec Spec
	Task Task
	// Warnings lists things Resolve ignored or overrode (an evaluator job in
	// TF_CONFIG, a flag replacing a different TF_CONFIG value), one sentence
	// each, for the caller to log.
	Warnings []string
	// From says where each address of Spec came from, index for index:
	// "--ps_hosts entry 2", "TF_CONFIG cluster.ps[1]",
	// "TF_CONFIG cluster.chief[0]". Resolve fills it; it is for messages
	// (see [Config.WaitResolvable]) and may be empty in a Config built by hand.
	From Spec
}

// IsChief reports whether this task is the chief, worker 0.
func (c Config) IsChief() bool { return c.Task.Job == JobWorker && c.Task.Index == 0 }

// Addr returns this task's own host:port, or "" when Task does not name a
// task of Spec (which cannot happen for a Config from Resolve).
func (c Config) Addr() string {
	hosts := c.Spec.Hosts(c.Task.Job)
	if c.Task.Index < 0 || c.Task.Index >= len(hosts) {
		return ""
	}
	return hosts[c.Task.Index]
}

// Validate checks c by the rules Resolve applies (see the package doc); it is
// for a Config built by hand, since one from Resolve is already valid.
// Warnings are not looked at.
func (c Config) Validate() error {
	return validate(c.Spec, c.Task, sources{
		ps: "Spec.PS", workers: "Spec.Workers", job: "Task.Job", index: "Task.Index",
	})
}

// Flags holds the raw values of the four cluster flags. The *Set booleans
// say whether the user gave the flag explicitly; an unset flag's value is its
// default, used only when TF_CONFIG lacks the field. [BindFlags] fills one
// from a flag.FlagSet.
type Flags struct {
	PSHosts, WorkerHosts, JobName string
	TaskIndex                     int

	PSHostsSet, WorkerHostsSet, JobNameSet, TaskIndexSet bool

	// TaskIndexEnv names an environment variable that holds this task's
	// index (--task_index_env), "" for none: JOB_COMPLETION_INDEX in an
	// Indexed Job's pod, or HOSTNAME in a StatefulSet's pod, whose name ends
	// in -N. TaskIndexEnvValue and TaskIndexEnvFound are that variable's
	// value and whether it is set; BindFlags reads them, so that Resolve
	// itself reads no environment.
	TaskIndexEnv      string
	TaskIndexEnvValue string
	TaskIndexEnvFound bool
}

// Flag names, as they appear in messages.
const (
	flagPS       = "--ps_hosts"
	flagWorkers  = "--worker_hosts"
	flagJob      = "--job_name"
	flagIndex    = "--task_index"
	flagIndexEnv = "--task_index_env"
)

// ConfigError marks a task's configuration the user must fix: not a
// failure to wait out or retry (paramserv exits 2). The packages that run
// a ps or a worker (trainer, lifecycle, replication) return it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Error is the type of every error this package returns. Its message names
// where the bad value came from, what was expected and what came.
type Error struct {
	// Source is where the value came from: a flag ("--ps_hosts"), a TF_CONFIG
	// key ("TF_CONFIG cluster.ps[1]"), "TF_CONFIG" itself, or "cluster" for
	// a problem between fields. Empty for ParseHosts.
	Source string
	// Msg says what was expected and what came.
	Msg string
	// Err is the underlying error, such as a *json.SyntaxError, or nil. Its
	// text is already part of Msg.
	Err error
}

func (e *Error) Error() string {
	if e.Source == "" {
		return e.Msg
	}
	return e.Source + ": " + e.Msg
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

func errorf(source, format string, args ...any) *Error {
	return &Error{Source: source, Msg: fmt.Sprintf(format, args...)}
}

// sources names where each field of a Config came from, for messages.
type sources struct {
	ps, workers, job, index string
	// indexShifted says the index came from a TF_CONFIG worker task and was
	// raised by one because the cluster names a chief.
	indexShifted bool
}

// Resolve merges explicit flags over TF_CONFIG, field by field, and
// validates the result. tfConfig is the raw value of the TF_CONFIG
// environment variable, "" when it is unset. The package doc gives the
// precedence rule; every error is an *Error.
func Resolve(f Flags, tfConfig string) (Config, error) {
	var tc TFConfig
	if strings.TrimSpace(tfConfig) != "" {
		var err error
		if tc, err = ParseTFConfig(tfConfig); err != nil {
			return Config{}, err
		}
	}
	c := Config{Warnings: slices.Clone(tc.Warnings)}
	var src sources
	var err error

	c.Spec.PS, src.ps, err = pickHosts(&c.Warnings, flagPS, f.PSHosts, f.PSHostsSet,
		"TF_CONFIG cluster.ps", tc.PS, tc.PSSet, "ps")
	if err != nil {
		return Config{}, err
	}
	c.From.PS = hostOrigins(src.ps, len(c.Spec.PS), "")
	tfWorkers := "TF_CONFIG cluster.worker"
	if tc.Chief != "" {
		tfWorkers = "TF_CONFIG cluster." + tc.Chief + " and cluster.worker"
	}
	c.Spec.Workers, src.workers, err = pickHosts(&c.Warnings, flagWorkers, f.WorkerHosts, f.WorkerHostsSet,
		tfWorkers, tc.Workers, tc.WorkersSet, "worker")
	if err != nil {
		return Config{}, err
	}
	c.From.Workers = hostOrigins(src.workers, len(c.Spec.Workers), tc.Chief)

	switch {
	case f.JobNameSet:
		c.Task.Job, src.job = f.JobName, flagJob
		if tc.Job != "" && tc.Job != f.JobName {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s overrides TF_CONFIG task.type (%s)", flagJob, f.JobName, tc.Job))
		}
	case tc.Job != "":
		c.Task.Job, src.job = tc.Job, "TF_CONFIG task.type"
	case f.JobName != "":
		c.Task.Job, src.job = f.JobName, flagJob+" (default)"
	default:
		return Config{}, errorf(flagJob, `no job name: set %s (ps or worker) or TF_CONFIG task.type`, flagJob)
	}

	switch {
	case f.TaskIndexSet && f.TaskIndexEnv != "":
		return Config{}, errorf(flagIndexEnv, "given together with %s=%d (want one of them: %s=N, or %s=VAR to read N from $VAR)",
			flagIndex, f.TaskIndex, flagIndex, flagIndexEnv)
	case f.TaskIndexSet:
		c.Task.Index, src.index = f.TaskIndex, flagIndex
		if tc.IndexSet && tc.Index != f.TaskIndex {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%d overrides TF_CONFIG task.index (task %d here)", flagIndex, f.TaskIndex, tc.Index))
		}
	case f.TaskIndexEnv != "":
		src.index = fmt.Sprintf("%s=%s", flagIndexEnv, f.TaskIndexEnv)
		if c.Task.Index, err = indexFromEnv(src.index, f.TaskIndexEnv, f.TaskIndexEnvValue, f.TaskIndexEnvFound); err != nil {
			return Config{}, err
		}
		src.index += fmt.Sprintf(" (%s=%q)", f.TaskIndexEnv, f.TaskIndexEnvValue)
		if tc.IndexSet && tc.Index != c.Task.Index {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s (%d) overrides TF_CONFIG task.index (task %d here)",
				flagIndexEnv, f.TaskIndexEnv, c.Task.Index, tc.Index))
		}
	case tc.IndexSet:
		c.Task.Index, src.index = tc.Index, "TF_CONFIG task.index"
		src.indexShifted = tc.Chief != "" && tc.Job == JobWorker
	default:
		c.Task.Index, src.index = f.TaskIndex, flagIndex+" (default)"
	}

	if err := validate(c.Spec, c.Task, src); err != nil {
		return Config{}, err
	}
	return c, nil
}

// indexFromEnv reads a task index from the value of environment variable
// name: a whole number (an Indexed Job's JOB_COMPLETION_INDEX), or a host or
// pod name whose first label ends in -N (a StatefulSet pod's HOSTNAME,
// "paramserv-ps-1", or its FQDN).
func indexFromEnv(src, name, val string, found bool) (int, error) {
	const want = "want a task index: a whole number such as 3, or a pod name ending in -N such as paramserv-ps-1"
	if !found {
		return 0, errorf(src, "environment variable %s is not set (%s)", name, want)
	}
	v := strings.TrimSpace(val)
	if host, _, ok := strings.Cut(v, "."); ok {
		v = host
	}
	if i := strings.LastIndexByte(v, '-'); i > 0 {
		v = v[i+1:]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxIndex || v == "" || v[0] == '+' || v[0] == '-' || len(v) > 1 && v[0] == '0' {
		return 0, errorf(src, "$%s is %q (%s)", name, val, want)
	}
	return n, nil
}

// hostOrigins names where each of n addresses came from, given where the
// list came from; chief is TFConfig.Chief when the list is TF_CONFIG's
// workers.
func hostOrigins(src string, n int, chief string) []string {
	from := make([]string, n)
	for i := range from {
		switch {
		case strings.HasPrefix(src, "TF_CONFIG") && chief != "" && i == 0:
			from[i] = "TF_CONFIG cluster." + chief + "[0]"
		case strings.HasPrefix(src, "TF_CONFIG") && chief != "":
			from[i] = fmt.Sprintf("TF_CONFIG cluster.worker[%d]", i-1)
		case strings.HasPrefix(src, "TF_CONFIG"):
			from[i] = fmt.Sprintf("%s[%d]", src, i)
		default:
			from[i] = fmt.Sprintf("%s entry %d", src, i+1)
		}
	}
	return from
}

// pickHosts chooses one job's host list by the precedence rule.
func pickHosts(warnings *[]string, flagName, flagVal string, flagSet bool,
	tfKey string, tfHosts []string, tfSet bool, job string) ([]string, string, error) {
	switch {
	case flagSet:
		hosts, err := parseHosts(flagName, flagVal)
		if err != nil {
			return nil, "", err
		}
		if tfSet && !slices.Equal(hosts, tfHosts) {
			*warnings = append(*warnings, fmt.Sprintf("%s overrides %s", flagName, tfKey))
		}
		return hosts, flagName, nil
	case tfSet:
		return tfHosts, tfKey, nil
	case flagVal != "":
		src := flagName + " (default)"
		hosts, err := parseHosts(src, flagVal)
		return hosts, src, err
	}
	return nil, "", errorf(flagName, "no %s hosts: set %s (e.g. %s=127.0.0.1:2222) or TF_CONFIG cluster.%s",
		job, flagName, flagName, job)
}

// validate checks a spec and task; src names each field's origin for the
// messages.
func validate(spec Spec, task Task, src sources) error {
	type owner struct {
		job   string
		index int
		src   string
		host  string
	}
	seen := make(map[string]owner)
	for _, j := range []struct {
		name, src string
		hosts     []string
	}{{JobPS, src.ps, spec.PS}, {JobWorker, src.workers, spec.Workers}} {
		if len(j.hosts) == 0 {
			return errorf(j.src, "no %s hosts (want at least one host:port)", j.name)
		}
		for i, h := range j.hosts {
			key, why := checkHostPort(h)
			if why != "" {
				return errorf(j.src, "%s task %d: %q %s", j.name, i, h, why)
			}
			if o, dup := seen[key]; dup {
				if o.host != h {
					return errorf("cluster", "%s task %d (%s) at %q and %s task %d (%s) at %q are the same address (want a distinct host:port for every task)",
						o.job, o.index, o.src, o.host, j.name, i, j.src, h)
				}
				return errorf("cluster", "%s task %d (%s) and %s task %d (%s) both have address %q (want a distinct host:port for every task)",
					o.job, o.index, o.src, j.name, i, j.src, h)
			}
			seen[key] = owner{j.name, i, j.src, h}
		}
	}

	hosts := spec.Hosts(task.Job)
	if hosts == nil {
		msg := fmt.Sprintf("%q is not a job (want %q or %q)", task.Job, JobPS, JobWorker)
		switch strings.ToLower(task.Job) {
		case JobPS, JobWorker:
			msg += "; job names are lower case"
		case "chief", "master":
			msg += fmt.Sprintf("; the chief is %s=%s %s=0", flagJob, JobWorker, flagIndex)
		}
		return &Error{Source: src.job, Msg: msg}
	}
	if task.Index < 0 || task.Index >= len(hosts) {
		msg := fmt.Sprintf("task index %d out of range: the %s job has %d %s (0..%d)",
			task.Index, task.Job, len(hosts), plural(len(hosts), "task", "tasks"), len(hosts)-1)
		if task.Index < 0 {
			msg = fmt.Sprintf("task index %d is negative (want 0..%d for the %s job)", task.Index, len(hosts)-1, task.Job)
		}
		if src.indexShifted {
			msg += fmt.Sprintf("; TF_CONFIG worker %d is worker %d here, since the chief is worker 0", task.Index-1, task.Index)
		}
		return &Error{Source: src.index, Msg: msg}
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
