package cli

// Help text and flag errors, one style for every subcommand: flags grouped
// under headings, each with its value's form and its default; --help
// prints to stdout and exits 0; a malformed flag prints the error, a
// suggestion when a flag's name is close, and one line pointing at --help,
// and exits 2.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paramserv/paramserv/internal/catalog"
	"github.com/paramserv/paramserv/internal/optim"
)

// flagGroups maps a flag's name to the heading it is listed under in
// --help. A flag that is not here is listed under "Other"; add new flags
// here to place them.
var flagGroups = map[string]string{
	// local's own
	"ps": groupCluster, "workers": groupCluster,
	"ps_hosts": groupCluster, "worker_hosts": groupCluster, "job_name": groupCluster,
	"task_index": groupCluster, "task_index_env": groupCluster,

	"model": groupModel, "data_dir": groupModel, "dataset": groupModel, "hidden_units": groupModel,
	"train_data": groupModel, "test_data": groupModel, "input_format": groupModel,
	"num_features": groupModel, "fields": groupModel, "skip_bad_lines": groupModel,
	"min_count": groupModel, "evict_after_steps": groupModel, "max_table_keys": groupModel,

	"train_steps": groupTraining, "steps_to_validate": groupTraining, "batch_size": groupTraining,
	"seed": groupTraining, "optimizer": groupTraining, "learning_rate": groupTraining,
	"momentum": groupTraining, "use_nesterov": groupTraining, "beta1": groupTraining,
	"beta2": groupTraining, "epsilon": groupTraining, "initial_accumulator_value": groupTraining,
	"ftrl_beta": groupTraining, "l1": groupTraining, "l2": groupTraining,
	"l2_shrinkage": groupTraining, "learning_rate_power": groupTraining, "rho": groupTraining, "centered": groupTraining,
	"weight_decay": groupTraining, "lr_schedule": groupTraining,
	"sync_replicas": groupTraining, "replicas_to_aggregate": groupTraining,
	"max_staleness": groupTraining, "split_bytes": groupTraining, "result_file": groupTraining,

	"checkpoint_dir": groupCheckpoints, "save_steps": groupCheckpoints,
	"save_model_secs": groupCheckpoints, "keep_checkpoints": groupCheckpoints,
	"table_memory": groupModel, "table_dir": groupModel, "evict_unseen": groupModel,
	"incremental_checkpoints": groupCheckpoints, "full_checkpoint_every": groupCheckpoints,

	"startup_timeout": groupRecovery, "worker_timeout": groupRecovery, "wait_log_every": groupRecovery,
	"recovery_timeout": groupRecovery, "sync_timeout": groupRecovery, "sync_on_timeout": groupRecovery,
	"ps_wait_forever": groupRecovery,
	// local's own
	"restart_ps": groupRecovery, "restart_workers": groupRecovery, "max_restarts": groupRecovery,

	"dim": groupModel, "reg": groupModel, "deep_scale": groupModel, "shuffle_buffer": groupModel, "validation_data": groupModel, "epochs": groupModel,
	"standalone": groupTraining, "overlap": groupTraining,
	"replicas": groupRecovery, "failover_timeout": groupRecovery, "replica_hosts": groupCluster,
	"dense_optimizer": groupModel, "dense_learning_rate": groupModel,

	"tls_cert": groupSecurity, "tls_key": groupSecurity, "tls_ca": groupSecurity, "tls_dir": groupSecurity,
	"auth_token_file": groupSecurity,

	"metrics_addr": groupMonitoring, "summary_dir": groupMonitoring, "save_summaries_steps": groupMonitoring,
	"log_format": groupMonitoring, "cpuprofile": groupMonitoring,
}

const (
	groupCluster     = "Cluster"
	groupModel       = "Model and data"
	groupTraining    = "Training"
	groupCheckpoints = "Checkpoints"
	groupRecovery    = "Recovery and timeouts"
	groupSecurity    = "Security (mutual TLS, token)"
	groupMonitoring  = "Monitoring (metrics, summaries, logs)"
	groupTF          = "TensorFlow compatibility (accepted, no effect)"
	groupOther       = "Other"
)

// groupOrder is the order of the headings in --help.
var groupOrder = []string{groupCluster, groupModel, groupTraining, groupCheckpoints, groupRecovery, groupSecurity, groupMonitoring, groupTF, groupOther}

func init() {
	for _, name := range ignoredTFFlags {
		flagGroups[name] = groupTF
	}
}

// flagPlaceholders names the form of a flag's value where its type alone
// says too little.
var flagPlaceholders = map[string]string{
	"ps_hosts": "HOST:PORT,...", "worker_hosts": "HOST:PORT,...", "job_name": "ps|worker",
	"save_model_secs": "SECONDS|DURATION", "split_bytes": "BYTES", "table_memory": "SIZE", "table_dir": "DIR",
	"lr_schedule":  "SCHEDULE",
	"input_format": "libsvm|criteo", "sync_on_timeout": "fail|proceed",
	"train_data": "FILE,...", "test_data": "FILE,...", "validation_data": "FILE,...", "data_dir": "DIR", "checkpoint_dir": "DIR",
	"result_file": "FILE", "dir": "DIR", "out": "DIR",
	"tls_cert": "FILE", "tls_key": "FILE", "tls_ca": "FILE", "tls_dir": "DIR", "auth_token_file": "FILE",
	"metrics_addr": "HOST:PORT", "summary_dir": "DIR", "log_format": "text|json",
	"o": "FILE", "cpuprofile": "PREFIX",
}

// commandPlaceholders overrides flagPlaceholders for one command, where a
// flag's name means another thing there ("paramserv export --out" is a file).
var commandPlaceholders = map[string]string{
	"paramserv export --out": "FILE",
}

// modelDefaults says a default that depends on --model, per model, for the
// flags whose zero means "the model's".
func modelDefaults(name string) string {
	var parts []string
	for _, m := range catalog.Names() {
		info, _ := catalog.Lookup(m)
		var v string
		switch name {
		case "train_steps":
			v = strconv.FormatInt(info.TrainSteps, 10)
		case "steps_to_validate":
			v = strconv.FormatInt(info.StepsToValidate, 10)
		case "optimizer":
			v = info.Optimizer
		case "learning_rate":
			v = strconv.FormatFloat(info.LearningRate, 'g', -1, 64)
		default:
			return ""
		}
		if v == "0" || v == "" {
			continue // the model's own package chooses (lda's sweeps, logreg_lbfgs's iterations)
		}
		parts = append(parts, m+" "+v)
	}
	return "default: the model's: " + strings.Join(parts, ", ")
}

// placeholder is the form of a flag's value: "" for a boolean flag.
func placeholder(fl *flag.Flag) string {
	if p, ok := flagPlaceholders[fl.Name]; ok {
		return p
	}
	if slices.Contains(ignoredTFFlags, fl.Name) {
		return "VALUE"
	}
	if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	if g, ok := fl.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return "DURATION"
		case int, int64, uint, uint64:
			return "N"
		case float64:
			return "X"
		}
	}
	switch fl.Name {
	case "model":
		return strings.Join(catalog.Names(), "|")
	case "optimizer":
		return strings.Join(optim.Names(), "|")
	}
	return "STRING"
}

// printFlags lists fs's flags, leaving out hidden ones: under the
// headings of flagGroups for train and local (grouped), in one list
// otherwise. Each flag is shown as --name=FORM, then its usage and its
// default.
func printFlags(w io.Writer, fs *flag.FlagSet, grouped bool, hidden map[string]bool) {
	byGroup := map[string][]*flag.Flag{}
	fs.VisitAll(func(fl *flag.Flag) {
		if hidden[fl.Name] {
			return
		}
		g, ok := flagGroups[fl.Name]
		if !ok || !grouped {
			g = groupOther
		}
		byGroup[g] = append(byGroup[g], fl)
	})
	for _, g := range groupOrder {
		fls := byGroup[g]
		if len(fls) == 0 {
			continue
		}
		switch {
		case grouped:
			fmt.Fprintf(w, "\n%s:\n", g)
		default:
			fmt.Fprintf(w, "\nFlags:\n")
		}
		for _, fl := range fls {
			if p, ok := commandPlaceholders[fs.Name()+" --"+fl.Name]; ok {
				fmt.Fprintf(w, "  --%s=%s\n", fl.Name, p)
			} else {
				fmt.Fprintf(w, "  %s\n", flagSynopsis(fl))
			}
			fmt.Fprintf(w, "      %s\n", flagDescription(fl))
		}
	}
}

func flagSynopsis(fl *flag.Flag) string {
	if p := placeholder(fl); p != "" {
		return "--" + fl.Name + "=" + p
	}
	return "--" + fl.Name
}

func flagDescription(fl *flag.Flag) string {
	usage := fl.Usage
	if d := modelDefaults(fl.Name); d != "" && (fl.DefValue == "" || fl.DefValue == "0") {
		return usage + " (" + d + ")" // a zero that means the model's (not bench's own default)
	}
	if strings.Contains(usage, "default") {
		return usage
	}
	switch fl.DefValue {
	case "", "false":
		return usage
	case "0":
		if strings.Contains(usage, "(0:") {
			return usage
		}
	}
	if slices.Contains(ignoredTFFlags, fl.Name) {
		return usage
	}
	return usage + " (default " + fl.DefValue + ")"
}

// parseArgs parses args into fs in the style of every subcommand. done says
// the command is over: after --help, which help has printed to stdout
// (code 0), or after a malformed flag (code 2), reported on stderr as the
// error, a "did you mean" when a flag's name is close, and a line pointing
// at --help.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, help func(io.Writer)) (code int, done bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		help(stdout)
		return 0, true
	}
	reportFlagError(fs, err, stderr)
	return 2, true
}

// reportFlagError prints a parse error of fs in the common style.
func reportFlagError(fs *flag.FlagSet, err error, stderr io.Writer) {
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		fmt.Fprintf(stderr, "%s: unknown flag --%s\n", fs.Name(), name)
		if s := suggestFlag(fs, name); s != "" {
			fmt.Fprintf(stderr, "did you mean --%s?\n", s)
		}
	} else {
		// The flag package writes -name; this project's help writes --name.
		fmt.Fprintf(stderr, "%s: %s%s\n", fs.Name(), strings.Replace(msg, " -", " --", 1), wantedValue(fs, msg))
	}
	fmt.Fprintf(stderr, "run '%s --help' for its flags\n", fs.Name())
}

// wantedValue says what kind of value the flag of the flag package's
// "invalid value ... for flag -name: ..." error takes, as " (want ...)",
// since its "parse error" names none; "" for other errors and for flags of
// their own types, whose errors say it already.
func wantedValue(fs *flag.FlagSet, msg string) string {
	if strings.HasPrefix(msg, "invalid boolean value ") {
		return " (want true or false; --name alone is true)"
	}
	_, rest, ok := strings.Cut(msg, " for flag -")
	if !strings.HasPrefix(msg, "invalid value ") || !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	fl := fs.Lookup(name)
	if fl == nil {
		return ""
	}
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return " (want a duration such as 30s, 5m or 1h30m)"
	case int, int64:
		return " (want a whole number)"
	case uint, uint64:
		return " (want a whole number >= 0)"
	case float64:
		return " (want a number such as 0.5 or 1e-3)"
	case bool:
		return " (want true or false)"
	}
	return ""
}

// suggestFlag is the defined flag closest to name, "" if none is close: at
// most a third of name's letters differ (two at most), or one name is a
// prefix of the other; '-' and '_' are the same.
func suggestFlag(fs *flag.FlagSet, name string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	n := norm(name)
	best, bestD := "", 1<<30
	var names []string
	fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	sort.Strings(names)
	for _, c := range names {
		cn := norm(c)
		d := editDistance(n, cn)
		limit := min(2, max(1, len(n)/3))
		if d > limit && !(len(n) >= 4 && (strings.HasPrefix(cn, n) || strings.HasPrefix(n, cn))) {
			continue
		}
		// Of two spellings of one flag (--test_rows, --test-rows), the
		// underscored one.
		if d < bestD || d == bestD && norm(best) == cn && !strings.Contains(c, "-") {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
