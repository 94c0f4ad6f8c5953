package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxTFConfigSize is the largest TF_CONFIG accepted, in bytes.
const MaxTFConfigSize = 1 << 20

// maxIndex bounds task.index. No list of tasks that fits in MaxTFConfigSize
// comes close.
const maxIndex = 1 << 20

const tfWant = `want a JSON object like {"cluster":{"ps":["h:2222"],"worker":["h:2223"]},"task":{"type":"worker","index":0}}`

// TFConfig is TF_CONFIG translated into paramserv's terms: a chief (or
// master) becomes worker 0 and shifts the worker tasks up by one (see the
// package doc). The *Set booleans say whether TF_CONFIG gave the field.
type TFConfig struct {
	PS    []string // cluster.ps
	PSSet bool
	// Workers is cluster.chief (or cluster.master) followed by
	// cluster.worker. WorkersSet is true when either key is present.
	Workers    []string
	WorkersSet bool
	// Chief is the key the chief came from, "chief" or "master", or "" when
	// the cluster names no chief.
	Chief string
	// Job is "ps" or "worker" (a chief's is "worker"), or "" when task.type
	// is absent.
	Job string
	// Index is the task's index among the Workers or PS above; a task with a
	// type and no index is index 0 of its TensorFlow job.
	Index    int
	IndexSet bool
	// Warnings lists what was ignored, such as an evaluator job.
	Warnings []string
}

// ParseTFConfig parses the value of the TF_CONFIG environment variable.
// It checks each address and the form of each field, but not what needs
// the other source too (that there is at least one ps and one worker, that
// the index is in range, that no address repeats): Resolve does that after
// merging the flags. Every error is an *Error whose Source starts with
// "TF_CONFIG".
func ParseTFConfig(s string) (TFConfig, error) {
	var tc TFConfig
	top, err := tfConfigObject(s)
	if err != nil {
		return tc, err
	}
	if raw, ok := top["cluster"]; ok && !isNull(raw) {
		if err := tc.parseCluster(raw); err != nil {
			return tc, err
		}
	}
	if raw, ok := top["task"]; ok && !isNull(raw) {
		if err := tc.parseTask(raw); err != nil {
			return tc, err
		}
	}
	return tc, nil
}

// tfConfigObject reads TF_CONFIG's top-level object, at most
// MaxTFConfigSize bytes of JSON.
func tfConfigObject(s string) (map[string]json.RawMessage, error) {
	if len(s) > MaxTFConfigSize {
		return nil, errorf("TF_CONFIG", "%d bytes, over the %d-byte (1 MiB) limit", len(s), MaxTFConfigSize)
	}
	var whole json.RawMessage
	if err := json.Unmarshal([]byte(s), &whole); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// se.Offset counts the bytes read, the bad one included; report
			// the bad byte's own 0-based offset, or the length at the end.
			off := se.Offset
			if off > 0 && !strings.HasPrefix(se.Error(), "unexpected end") {
				off--
			}
			return nil, &Error{Source: "TF_CONFIG", Msg: fmt.Sprintf("invalid JSON at offset %d: %v (%s)", off, se, tfWant), Err: err}
		}
		return nil, &Error{Source: "TF_CONFIG", Msg: fmt.Sprintf("invalid JSON: %v (%s)", err, tfWant), Err: err}
	}
	return object("TF_CONFIG", whole, tfWant)
}

// parseCluster reads TF_CONFIG's cluster: the ps and worker hosts, the
// chief's (first of the workers), and the evaluator's (ignored, with a
// warning).
func (tc *TFConfig) parseCluster(raw json.RawMessage) error {
	cluster, err := object("TF_CONFIG cluster", raw, `want an object like {"ps":["h:2222"],"worker":["h:2223"]}`)
	if err != nil {
		return err
	}
	jobs := make([]string, 0, len(cluster))
	for job := range cluster {
		jobs = append(jobs, job)
	}
	slices.Sort(jobs) // errors in a stable order
	var worker, chief []string
	for _, job := range jobs {
		raw := cluster[job]
		key := "TF_CONFIG cluster." + job
		switch job {
		case JobPS:
			if tc.PS, err = hostList(key, raw); err != nil {
				return err
			}
			tc.PSSet = true
		case JobWorker:
			if worker, err = hostList(key, raw); err != nil {
				return err
			}
			tc.WorkersSet = true
		case "chief", "master":
			if tc.Chief != "" {
				return errorf("TF_CONFIG cluster", `has both "chief" and "master" (want at most one; master is the old name for chief)`)
			}
			if chief, err = hostList(key, raw); err != nil {
				return err
			}
			if len(chief) != 1 {
				return errorf(key, "has %d hosts (want exactly one)", len(chief))
			}
			tc.Chief = job
			tc.WorkersSet = true
		case "evaluator":
			tc.Warnings = append(tc.Warnings, "TF_CONFIG cluster.evaluator ignored: paramserv runs no evaluator job")
		default:
			msg := fmt.Sprintf(`unknown job %q (want "ps", "worker", "chief", "master" or "evaluator")`, job)
			if lower := strings.ToLower(job); lower != job && isTFJob(lower) {
				msg += "; job names are lower case"
			}
			return errorf("TF_CONFIG cluster", "%s", msg)
		}
	}
	if tc.WorkersSet {
		tc.Workers = append(chief, worker...)
	}
	return nil
}

// parseTask reads TF_CONFIG's task: this process's job and index, after
// the cluster (a chief's task is worker 0, and shifts the workers' indexes
// by one).
func (tc *TFConfig) parseTask(raw json.RawMessage) error {
	task, err := object("TF_CONFIG task", raw, `want an object like {"type":"worker","index":0}`)
	if err != nil {
		return err
	}
	typ, err := taskType(task)
	if err != nil {
		return err
	}
	if raw, ok := task["index"]; ok && !isNull(raw) {
		if tc.Index, err = parseIndex(raw); err != nil {
			return err
		}
		tc.IndexSet = true
	} else if typ != "" {
		tc.IndexSet = true // TensorFlow's default, index 0
	}
	switch typ {
	case "":
	case JobPS:
		tc.Job = JobPS
	case JobWorker:
		tc.Job = JobWorker
		if tc.Chief != "" {
			tc.Index++
		}
	case "chief", "master":
		if tc.Chief == "" {
			return errorf("TF_CONFIG task.type", `is %q, but cluster has no "chief" or "master" job (want cluster.%s with the chief's host:port)`, typ, typ)
		}
		if tc.Index != 0 {
			return errorf("TF_CONFIG task.index", "task index %d out of range: the %s job has 1 task (0..0)", tc.Index, typ)
		}
		tc.Job = JobWorker
	case "evaluator":
		return errorf("TF_CONFIG task.type", `"evaluator" is not supported (want "ps", "worker" or "chief"; run evaluation outside the training cluster)`)
	default:
		msg := fmt.Sprintf(`%q is not a job (want "ps", "worker", "chief" or "master")`, typ)
		if lower := strings.ToLower(typ); lower != typ && isTFJob(lower) {
			msg += "; job names are lower case"
		}
		return errorf("TF_CONFIG task.type", "%s", msg)
	}
	return nil
}

// taskType is the task's type, "" where it has none.
func taskType(task map[string]json.RawMessage) (string, error) {
	raw, ok := task["type"]
	if !ok || isNull(raw) {
		return "", nil
	}
	if kind(raw) != "string" {
		return "", errorf("TF_CONFIG task.type", `got %s, want a string: "ps", "worker" or "chief"`, described(kind(raw), raw))
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return "", &Error{Source: "TF_CONFIG task.type", Msg: err.Error(), Err: err}
	}
	if typ == "" {
		return "", errorf("TF_CONFIG task.type", `empty (want "ps", "worker" or "chief")`)
	}
	return typ, nil
}

func isTFJob(name string) bool {
	switch name {
	case JobPS, JobWorker, "chief", "master", "evaluator":
		return true
	}
	return false
}

// object decodes raw, which must be a JSON object, into its members.
func object(src string, raw json.RawMessage, want string) (map[string]json.RawMessage, error) {
	if k := kind(raw); k != "object" {
		return nil, errorf(src, "got %s, %s", described(k, raw), want)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &Error{Source: src, Msg: err.Error(), Err: err}
	}
	if key, ok := repeatedKey(raw); ok {
		// encoding/json keeps the last silently; a TF_CONFIG naming "ps"
		// twice is a mistake to show, not a choice to make.
		return nil, errorf(src, "member %q given twice, %s", key, want)
	}
	return m, nil
}

// repeatedKey returns the first member name that raw, a valid JSON object,
// gives more than once.
func repeatedKey(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := t.(string)
		if seen[key] {
			return key, true
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// hostList decodes a job's list of addresses and checks each one.
func hostList(src string, raw json.RawMessage) ([]string, error) {
	if k := kind(raw); k != "array" {
		return nil, errorf(src, `got %s, want a list of "host:port" strings`, described(k, raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, &Error{Source: src, Msg: err.Error(), Err: err}
	}
	hosts := make([]string, len(elems))
	for i, e := range elems {
		esrc := fmt.Sprintf("%s[%d]", src, i)
		if k := kind(e); k != "string" {
			return nil, errorf(esrc, `got %s, want a "host:port" string`, described(k, e))
		}
		if err := json.Unmarshal(e, &hosts[i]); err != nil {
			return nil, &Error{Source: esrc, Msg: err.Error(), Err: err}
		}
		if _, why := checkHostPort(hosts[i]); why != "" {
			return nil, errorf(esrc, "%q %s", hosts[i], why)
		}
	}
	return hosts, nil
}

// parseIndex wants a JSON number holding a whole number in 0..maxIndex.
func parseIndex(raw json.RawMessage) (int, error) {
	const src = "TF_CONFIG task.index"
	switch k := kind(raw); k {
	case "number":
	case "string":
		var s string
		_ = json.Unmarshal(raw, &s)
		if _, err := strconv.Atoi(s); err == nil {
			return 0, errorf(src, `got the string %q, want a number (write "index": %s, without quotes)`, s, s)
		}
		return 0, errorf(src, "got the string %q, want a whole number 0 or more", s)
	default:
		return 0, errorf(src, "got %s, want a whole number 0 or more", described(k, raw))
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case f < 0:
		return 0, errorf(src, "%s is negative (want a whole number 0 or more)", raw)
	case err != nil || f > maxIndex:
		return 0, errorf(src, "%s is too large (want a task index under %d)", raw, maxIndex)
	case f != math.Trunc(f):
		return 0, errorf(src, "%s is not a whole number (want e.g. 1)", raw)
	}
	return int(f), nil
}

// kind names the JSON type of a valid JSON value.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func isNull(raw json.RawMessage) bool { return kind(raw) == "null" }

// snippet quotes the start of raw for a message.
// described is what came, for an error: its kind and its start ("string
// "h:1""), or "null" alone.
func described(k string, raw json.RawMessage) string {
	if k == "null" {
		return k
	}
	return k + " " + snippet(raw)
}

func snippet(raw json.RawMessage) string {
	const max = 40
	s := string(bytes.TrimSpace(raw))
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
