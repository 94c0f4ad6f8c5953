package cli

import (
	"cmp"
	"path/filepath"
	"strconv"
)

// ownProgramEnv is the environment local gives each worker of an own
// program (-- CMD) beside TF_CONFIG and the authentication files: its
// checkpoint and summary flags, which the Python binding
// (paramserv.Client) and paramserv.Start read when the program does not
// name its own, so that they are given once, to local. --summary_dir
// defaults to --checkpoint_dir, as for the built-in models.
func ownProgramEnv(f *trainFlags) []string {
	var env []string
	add := func(name, val string) { env = append(env, name+"="+val) }
	abs := func(dir string) string {
		if a, err := filepath.Abs(dir); err == nil {
			return a
		}
		return dir
	}
	if f.checkpointDir != "" {
		add("PARAMSERV_CHECKPOINT_DIR", abs(f.checkpointDir))
	}
	if dir := cmp.Or(f.telemetry.summaryDir, f.checkpointDir); dir != "" {
		add("PARAMSERV_SUMMARY_DIR", abs(dir))
	}
	if f.set("save_steps") {
		add("PARAMSERV_SAVE_STEPS", strconv.FormatInt(f.saveSteps, 10))
	}
	if f.set("save_model_secs") {
		add("PARAMSERV_SAVE_SECS", strconv.FormatFloat(f.saveEvery.Seconds(), 'g', -1, 64))
	}
	if f.set("save_summaries_steps") {
		add("PARAMSERV_SAVE_SUMMARIES_STEPS", strconv.FormatInt(f.telemetry.saveSummariesSteps, 10))
	}
	return env
}
