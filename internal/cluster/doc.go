// Package cluster describes a paramserv cluster: the host:port address of
// every task, and which task this process is.
//
// A cluster has two jobs. Tasks of the "ps" job hold the variables; tasks of
// the "worker" job compute gradients. The tasks of a job are numbered from 0
// in the order their addresses are listed, and worker 0 is the chief: it
// initializes the variables and writes checkpoints.
//
// Nothing here reads the environment or the command line by itself: the
// caller passes the flag values (see [BindFlags]) and the raw value of
// TF_CONFIG to [Resolve], which merges and validates them into a [Config].
//
// # Sources
//
// The cluster comes from TensorFlow-style flags,
//
//	--ps_hosts=ps0:2222,ps1:2222 --worker_hosts=w0:2222,w1:2222 --job_name=worker --task_index=1
//
// from the TF_CONFIG environment variable, as the Kubeflow TFJob operator
// sets it,
//
//	{"cluster": {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222"]},
//	 "task": {"type": "worker", "index": 1}}
//
// or from both.
//
// # Precedence
//
// Each field is taken from the first source that has it:
//
//  1. the flag, when it is given explicitly on the command line;
//  2. TF_CONFIG;
//  3. the flag's default value.
//
// The merge is per field, so a flag replaces only its own field and the rest
// still comes from TF_CONFIG: --ps_hosts replaces cluster.ps, --worker_hosts
// replaces cluster.worker (together with cluster.chief or cluster.master, see
// below), --job_name replaces task.type and --task_index replaces task.index.
// A flag that replaces a different TF_CONFIG value adds a warning to
// [Config.Warnings]. When neither source gives the ps hosts, the worker hosts
// or the job name, Resolve fails and names the flag and the TF_CONFIG key to
// set; a task index given by neither is the --task_index default (0). An empty
// TF_CONFIG counts as unset.
//
// # Chief and master
//
// TF_CONFIG may put the chief in a job of its own, "chief" (or "master", its
// older name), with exactly one address. paramserv has no separate chief
// job: the chief becomes worker 0 and the tasks of the "worker" job follow
// it, so task {"type":"chief","index":0} is worker 0 and
// {"type":"worker","index":i} is worker i+1. TF_CONFIG is translated this way
// before the flags are applied, so the flags always use paramserv's
// numbering: --worker_hosts lists the chief first, and --job_name=worker
// --task_index=0 is the chief.
//
// # What else TF_CONFIG may hold
//
// An "evaluator" job in cluster is ignored with a warning, since an
// evaluator takes no part in training; a task whose type is "evaluator" is
// an error. Any other job in cluster is an error. Top-level keys other than
// "cluster" and "task", such as "environment" and "rpc_layer", are ignored.
// task.index must be a JSON number holding a whole number 0 or more (1, not
// "1"); a task with a type and no index is index 0, as in TensorFlow.
// TF_CONFIG longer than [MaxTFConfigSize] (1 MiB) is rejected.
//
// # Task index from the environment
//
// --task_index_env=VAR reads the task index from environment variable VAR, so
// one pod template serves every task of a job: JOB_COMPLETION_INDEX in a
// Kubernetes Indexed Job, or HOSTNAME in a StatefulSet, whose pods are named
// NAME-0, NAME-1, ... (the number after the last '-' of the first label). It
// takes the place of --task_index (giving both is an error) and overrides
// TF_CONFIG task.index with a warning. [BindFlags] reads the variable.
//
// # Host names that do not resolve yet
//
// [Config.WaitResolvable] waits, up to a bound, until the host names a task
// needs resolve (a ps its own, a worker every ps's), saying what it awaits
// every so often and, at the bound, which host of which task did not resolve
// and where that address came from. In a pod, the DNS names of the pod itself
// and of its peers may appear only some seconds after it starts.
//
// # Validation
//
// A resolved Config has at least one ps and one worker. Every address is
// host:port with a non-empty host (a hostname, an IPv4 address, or an IPv6
// address in brackets such as [::1]:2222) and a decimal port in 1..65535.
// No address appears twice in the cluster. The job is "ps" or "worker" and
// the index is within that job. In --ps_hosts and --worker_hosts, entries are
// separated by single commas, spaces around them are ignored, and an empty
// entry (a trailing comma, say) is an error; error messages number the
// entries from 1.
//
// Every error is an [*Error] that names where the bad value came from (a
// flag, or a TF_CONFIG key), what was expected and what came, for example
//
//	--ps_hosts: entry 2 "localhost" is not host:port (missing port in address; want e.g. 127.0.0.1:2222)
//	--task_index: task index 3 out of range: the worker job has 2 tasks (0..1)
//
// so a command can tell a user's mistake (exit status 2) from other failures
// with [errors.As].
package cluster
