package cluster

import (
	"flag"
	"os"
)

// BindFlags defines ps_hosts, worker_hosts, job_name, task_index and
// task_index_env on fs, with empty defaults and task index 0. After
// fs.Parse, the returned function reads their values into a Flags, setting
// each *Set boolean when the flag was given on the command line, and, when
// task_index_env names a variable, reads that variable from the environment.
func BindFlags(fs *flag.FlagSet) func() Flags {
	var f Flags
	fs.StringVar(&f.PSHosts, "ps_hosts", "",
		"comma-separated host:port of the ps tasks; overrides TF_CONFIG cluster.ps")
	fs.StringVar(&f.WorkerHosts, "worker_hosts", "",
		"comma-separated host:port of the worker tasks, the chief (worker 0) first; overrides TF_CONFIG cluster.chief and cluster.worker")
	fs.StringVar(&f.JobName, "job_name", "",
		"this task's job, ps or worker; overrides TF_CONFIG task.type")
	fs.IntVar(&f.TaskIndex, "task_index", 0,
		"this task's index within its job; worker 0 is the chief; overrides TF_CONFIG task.index")
	fs.StringVar(&f.TaskIndexEnv, "task_index_env", "",
		"read this task's index from the named environment variable: JOB_COMPLETION_INDEX in a Kubernetes Indexed Job, HOSTNAME in a StatefulSet (the pod name's -N); instead of --task_index, overrides TF_CONFIG task.index")
	return func() Flags {
		g := f
		if g.TaskIndexEnv != "" {
			g.TaskIndexEnvValue, g.TaskIndexEnvFound = os.LookupEnv(g.TaskIndexEnv)
		}
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "ps_hosts":
				g.PSHostsSet = true
			case "worker_hosts":
				g.WorkerHostsSet = true
			case "job_name":
				g.JobNameSet = true
			case "task_index":
				g.TaskIndexSet = true
			}
		})
		return g
	}
}
