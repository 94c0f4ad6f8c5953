package main

// Tests of what deploys paramserv: the Dockerfile's stages (and the static
// binary its scratch stage takes), and the Kubernetes manifests in deploy/,
// down to the cluster every pod would resolve.

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/paramserv/paramserv/internal/cluster"
	"github.com/paramserv/paramserv/internal/secure"
	"github.com/paramserv/paramserv/internal/testutil"
)

const repoRoot = "../.."

// dockerStage is one FROM ... [AS name] section of a Dockerfile.
type dockerStage struct {
	from, name string
	instrs     [][2]string // instruction (upper case), rest of the line
}

// parseDockerfile splits a Dockerfile into stages, joining continued lines
// and dropping comments.
func parseDockerfile(t *testing.T, path string) (args map[string]string, stages []*dockerStage) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	args = map[string]string{}
	var logical []string
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		logical = append(logical, cur+trimmed)
		cur = ""
	}
	if cur != "" {
		t.Fatalf("%s: last line ends in a backslash", path)
	}
	for _, l := range logical {
		instr, rest, _ := strings.Cut(l, " ")
		instr, rest = strings.ToUpper(instr), strings.TrimSpace(rest)
		if instr == "FROM" {
			f := strings.Fields(rest)
			s := &dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("%s: FROM %q: want FROM image [AS name]", path, rest)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if instr != "ARG" {
				t.Fatalf("%s: %s before the first FROM", path, instr)
			}
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
			continue
		}
		s := stages[len(stages)-1]
		s.instrs = append(s.instrs, [2]string{instr, rest})
	}
	return args, stages
}

func (s *dockerStage) all(instr string) []string {
	var out []string
	for _, in := range s.instrs {
		if in[0] == instr {
			out = append(out, in[1])
		}
	}
	return out
}

// checkRuntimeStage checks what every image stage must have: the binary at
// /paramserv as the exec-form entrypoint, run as a user that is not root.
// It returns the COPY instructions that put the binary there.
func checkRuntimeStage(t *testing.T, s *dockerStage) (copySrc string) {
	t.Helper()
	if s.from != "scratch" {
		t.Errorf("stage %s is FROM %s, want scratch (nothing but the static binary)", s.name, s.from)
	}
	for _, c := range s.all("COPY") {
		f := strings.Fields(c)
		if f[len(f)-1] == "/paramserv" {
			copySrc = strings.Join(f[:len(f)-1], " ")
		}
	}
	if copySrc == "" {
		t.Errorf("stage %s has no COPY ... /paramserv (COPYs: %q)", s.name, s.all("COPY"))
	}
	ep := s.all("ENTRYPOINT")
	var argv []string
	if len(ep) != 1 || json.Unmarshal([]byte(ep[0]), &argv) != nil || !slices.Equal(argv, []string{"/paramserv"}) {
		t.Errorf(`stage %s: ENTRYPOINT %s, want exactly one, ["/paramserv"] (exec form: scratch has no shell)`, s.name, strings.Join(ep, "; "))
	}
	u := s.all("USER")
	if len(u) != 1 || strings.HasPrefix(u[0], "0") || strings.HasPrefix(u[0], "root") {
		t.Errorf("stage %s: USER %q, want one numeric non-root user", s.name, u)
	}
	return copySrc
}

func TestDockerfile(t *testing.T) {
	_, stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	byName := map[string]*dockerStage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	build, prebuilt := byName["build"], byName["prebuilt"]
	if build == nil || prebuilt == nil {
		t.Fatalf("stages %v: want one named build and one named prebuilt", slices.Collect(func(yield func(string) bool) {
			for _, s := range stages {
				yield(s.from + " AS " + s.name)
			}
		}))
	}
	if !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("build stage is FROM %s, want golang:...", build.from)
	}
	run := strings.Join(build.all("RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/paramserv", "-o /out/paramserv"} {
		if !strings.Contains(run, want) {
			t.Errorf("build stage's RUN lacks %q:\n%s", want, run)
		}
	}
	last := stages[len(stages)-1]
	if last == prebuilt || last == build {
		t.Errorf("the last (default) stage is %s; want the image built from source, so that plain docker build works", last.name)
	}
	if src := checkRuntimeStage(t, last); src != "--from=build /out/paramserv" {
		t.Errorf("default stage copies %q to /paramserv, want --from=build /out/paramserv", src)
	}
	src := checkRuntimeStage(t, prebuilt)
	if strings.HasPrefix(src, "--") || strings.Contains(src, " ") {
		t.Fatalf("prebuilt stage copies %q, want one file from the build context", src)
	}

	// Build what the prebuilt stage takes, as its comment says, into a
	// context directory; then lay out the stage's file system as docker
	// would and run the entrypoint in it. -trimpath compiles every package
	// again (minutes with an empty build cache), so this half runs in the
	// full run, as the cross-builds do.
	testutil.Full(t, "the static -trimpath build compiles every package again")
	ctx := t.TempDir()
	bin := filepath.Join(ctx, src)
	gb := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	gb.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build -trimpath: %v\n%s", err, out)
	}
	checkStatic(t, bin)
	root, _ := filepath.Abs(repoRoot)
	if b, _ := os.ReadFile(bin); bytes.Contains(b, []byte(root+"/")) {
		t.Errorf("the binary holds the source path %s: -trimpath did not apply", root)
	}
	if ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore")); err == nil {
		for _, l := range strings.Split(string(ignore), "\n") {
			if m, _ := filepath.Match(strings.TrimSpace(l), src); m {
				t.Errorf(".dockerignore line %q leaves %s out of the context the prebuilt stage copies from", l, src)
			}
		}
	}

	rootfs := t.TempDir()
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(rootfs, "paramserv"))
	cmd := exec.Command("/paramserv", "--help")
	where := "chroot to a directory holding only /paramserv, as user 65532"
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		cmd.Dir = "/"
		cmd.Env = []string{}
	} else {
		cmd = exec.Command(filepath.Join(rootfs, "paramserv"), "--help")
		where = "not root, so outside a chroot"
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "train") {
		t.Errorf("/paramserv --help (%s): %v\n%s", where, err, out)
	}
	t.Logf("/paramserv --help ran (%s)", where)
}

// staticErr says why bin is not a static ELF executable (an interpreter,
// a dynamic section, shared libraries), or returns nil.
func staticErr(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%s has a %v program header: dynamically linked, want static (CGO_ENABLED=0)", bin, p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %q, want none", bin, libs)
	}
	return nil
}

func checkStatic(t *testing.T, bin string) {
	t.Helper()
	if err := staticErr(bin); err != nil {
		t.Error(err)
	}
}

func TestStaticCheckCatchesDynamic(t *testing.T) {
	// The check itself: a dynamically linked binary (any on this system) fails it.
	dyn, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls to check against")
	}
	if err := staticErr(dyn); err == nil {
		t.Errorf("staticErr passed %s, a dynamically linked binary", dyn)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// manifest is one Kubernetes object from a file in deploy/.
type manifest struct {
	file string
	obj  map[string]any
}

func (m manifest) kind() string { return str(m.obj["kind"]) }
func (m manifest) name() string { return str(get(m.obj, "metadata", "name")) }
func (m manifest) String() string {
	return fmt.Sprintf("%s: %s %s", m.file, m.kind(), m.name())
}

func str(v any) string { s, _ := v.(string); return s }

// get walks nested maps by key.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

func intOf(v any) (int, bool) { n, ok := v.(int); return n, ok }

// loadManifests reads every YAML document under deploy/.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under deploy/: %v", err)
	}
	var ms []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", rel, i+1, err)
			}
			if obj != nil {
				ms = append(ms, manifest{rel, obj})
			}
		}
	}
	return ms
}

var knownKinds = map[string]string{
	"Service": "v1", "PersistentVolumeClaim": "v1", "Job": "batch/v1", "StatefulSet": "apps/v1", "TFJob": "kubeflow.org/v1",
	"NetworkPolicy": "networking.k8s.io/v1",
}

// trainFlagNames are the flags `paramserv train` accepts, from its help.
func trainFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(binary, "train", "--help").CombinedOutput()
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --(\w+)`).FindAllStringSubmatch(string(out), -1) {
		names[m[1]] = true
	}
	if !names["ps_hosts"] || !names["checkpoint_dir"] {
		t.Fatalf("could not read train's flags from its help:\n%s", out)
	}
	return names
}

// podCheck is what TestManifests learns about one pod template.
type podCheck struct {
	where  string
	labels map[string]any
	spec   map[string]any
	train  map[string]any // the container running paramserv train
	args   []string
	tlsDir string // --tls_dir, on a mounted Secret
}

// checkPod checks a pod template: containers with image and args, flags
// train knows, volumes mounted that exist, and the checkpoint directory on a
// persistent volume claim; it returns the train container.
func checkPod(t *testing.T, where string, tmpl any, claims map[string]bool, trainFlags map[string]bool) *podCheck {
	t.Helper()
	spec, _ := get(tmpl, "spec").(map[string]any)
	labels, _ := get(tmpl, "metadata", "labels").(map[string]any)
	pc := &podCheck{where: where, labels: labels, spec: spec}
	volumes := map[string]map[string]any{}
	for _, v := range list(spec["volumes"]) {
		vm, _ := v.(map[string]any)
		volumes[str(vm["name"])] = vm
		if c := str(get(vm, "persistentVolumeClaim", "claimName")); c != "" && !claims[c] {
			t.Errorf("%s: volume %s claims %q, which no PersistentVolumeClaim in deploy/ defines", where, vm["name"], c)
		}
	}
	containers := append(list(spec["initContainers"]), list(spec["containers"])...)
	if len(list(spec["containers"])) == 0 {
		t.Errorf("%s: no containers", where)
	}
	for _, c := range containers {
		cm, _ := c.(map[string]any)
		cw := fmt.Sprintf("%s container %s", where, cm["name"])
		if str(cm["image"]) == "" || str(cm["name"]) == "" {
			t.Errorf("%s: want a name and an image", cw)
		}
		var args []string
		for _, a := range list(cm["args"]) {
			args = append(args, str(a))
		}
		if len(args) == 0 || len(list(cm["command"])) > 0 {
			t.Errorf("%s: args %q, command %v: want args starting with a paramserv command and no command (the image's entrypoint is /paramserv)", cw, args, cm["command"])
			continue
		}
		mounts := map[string]string{}  // path -> claim
		secrets := map[string]string{} // path -> secret
		for _, m := range list(cm["volumeMounts"]) {
			mm, _ := m.(map[string]any)
			v, ok := volumes[str(mm["name"])]
			if !ok {
				t.Errorf("%s mounts volume %q, which the pod does not have", cw, mm["name"])
				continue
			}
			mounts[str(mm["mountPath"])] = str(get(v, "persistentVolumeClaim", "claimName"))
			secrets[str(mm["mountPath"])] = str(get(v, "secret", "secretName"))
		}
		if args[0] != "train" {
			continue
		}
		if pc.train != nil {
			t.Errorf("%s: two containers run train", where)
		}
		pc.train, pc.args = cm, args
		flags := map[string]string{}
		for _, a := range args[1:] {
			name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasPrefix(a, "-") || !ok || !trainFlags[name] {
				t.Errorf("%s: arg %q is not --flag=value of a flag paramserv train has", cw, a)
			}
			flags[name] = val
		}
		if dir, ok := flags["tls_dir"]; ok {
			// The Secret paramserv certs writes, mounted where --tls_dir
			// looks.
			if secrets[dir] != "paramserv-tls" {
				t.Errorf("%s: --tls_dir=%s is not the mount path of the Secret paramserv-tls (paramserv certs' secret.yaml); mounted secrets %v", cw, dir, secrets)
			}
			pc.tlsDir = dir
		}
		ckpt := flags["checkpoint_dir"]
		onClaim := false
		for p, claim := range mounts {
			if claim != "" && (ckpt == p || strings.HasPrefix(ckpt, strings.TrimSuffix(p, "/")+"/")) {
				onClaim = true
			}
		}
		if !onClaim {
			t.Errorf("%s: --checkpoint_dir=%q is not on a mounted persistent volume claim (mounts %v)", cw, ckpt, mounts)
		}
	}
	if pc.train == nil {
		t.Errorf("%s: no container runs paramserv train", where)
	}
	return pc
}

// resolveArgs resolves the cluster a pod would see: its args' cluster flags
// parsed by the real flag definitions, with env set and TF_CONFIG.
func resolveArgs(t *testing.T, args []string, env map[string]string, tfConfig string) (cluster.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	get := cluster.BindFlags(fs)
	var clusterArgs []string
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if fs.Lookup(name) != nil {
			clusterArgs = append(clusterArgs, a)
		}
	}
	if err := fs.Parse(clusterArgs); err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	return cluster.Resolve(get(), tfConfig)
}

func containerPort(t *testing.T, where string, c map[string]any, name string) int {
	for _, p := range list(c["ports"]) {
		if name == "" || str(get(p, "name")) == name {
			if n, ok := intOf(get(p, "containerPort")); ok {
				return n
			}
		}
	}
	t.Errorf("%s: no containerPort named %q", where, name)
	return 0
}

func TestManifests(t *testing.T) {
	ms := loadManifests(t)
	trainFlags := trainFlagNames(t)
	claims := map[string]bool{}
	kinds := map[string]int{}
	for _, m := range ms {
		want, known := knownKinds[m.kind()]
		switch {
		case !known:
			t.Errorf("%s: kind %q, want one of %v", m.file, m.kind(), knownKinds)
		case str(m.obj["apiVersion"]) != want:
			t.Errorf("%s: apiVersion %q, want %q", m, m.obj["apiVersion"], want)
		}
		if m.name() == "" {
			t.Errorf("%s: %s without metadata.name", m.file, m.kind())
		}
		kinds[m.kind()]++
		if m.kind() == "PersistentVolumeClaim" {
			claims[m.name()] = true
			if modes := list(get(m.obj, "spec", "accessModes")); !slices.Contains(modes, any("ReadWriteMany")) {
				t.Errorf("%s: accessModes %v, want ReadWriteMany: pods on different nodes share the checkpoints", m, modes)
			}
		}
	}
	if kinds["TFJob"] == 0 || kinds["Service"] == 0 || kinds["Job"]+kinds["StatefulSet"] == 0 {
		t.Errorf("deploy/ has %v; want a TFJob, and a Service with Jobs or StatefulSets", kinds)
	}
	var pods []*podCheck
	for _, m := range ms {
		switch m.kind() {
		case "TFJob":
			pods = append(pods, checkTFJob(t, m, claims, trainFlags)...)
		case "Service":
			pods = append(pods, checkPlain(t, m, ms, claims, trainFlags)...)
		}
	}
	// A NetworkPolicy lets the job's pods, and only them, reach every pod's port.
	for _, m := range ms {
		if m.kind() != "NetworkPolicy" {
			continue
		}
		sel, _ := get(m.obj, "spec", "podSelector", "matchLabels").(map[string]any)
		ingress := list(get(m.obj, "spec", "ingress"))
		if len(sel) == 0 || len(ingress) != 1 || len(list(get(ingress[0], "from"))) != 1 {
			t.Errorf("%s: want matchLabels and one ingress rule from one podSelector", m)
			continue
		}
		from, _ := get(list(get(ingress[0], "from"))[0], "podSelector", "matchLabels").(map[string]any)
		var ports []int
		for _, p := range list(get(ingress[0], "ports")) {
			n, _ := intOf(get(p, "port"))
			ports = append(ports, n)
		}
		for _, p := range pods {
			for what, labels := range map[string]map[string]any{"podSelector": sel, "ingress from": from} {
				for k, v := range labels {
					if p.labels[k] != v {
						t.Errorf("%s: %s %s=%v does not select %s (label %v)", m, what, k, v, p.where, p.labels[k])
					}
				}
			}
			if p.train != nil {
				if port := containerPort(t, p.where, p.train, ""); !slices.Contains(ports, port) {
					t.Errorf("%s: ingress ports %v leave out %s's port %d", m, ports, p.where, port)
				}
			}
		}
	}
	// Every pod sees the checkpoints at the same path on the same claim.
	type place struct{ dir, claim string }
	seen := map[place][]string{}
	for _, p := range pods {
		if p.train == nil {
			continue
		}
		dir := ""
		for _, a := range p.args {
			if v, ok := strings.CutPrefix(a, "--checkpoint_dir="); ok {
				dir = v
			}
		}
		claim := ""
		for _, v := range list(p.spec["volumes"]) {
			if c := str(get(v, "persistentVolumeClaim", "claimName")); c != "" {
				claim = c
			}
		}
		k := place{dir, claim}
		seen[k] = append(seen[k], p.where)
	}
	if len(seen) != 1 {
		t.Errorf("pods see checkpoints at different places (path, claim): %v", seen)
	}
}

// checkTFJob checks a TFJob and resolves the TF_CONFIG the operator gives
// each replica: cluster from the replica specs, each host the replica's
// Service, <job>-<type>-<index>.<namespace>.svc:<tfjob-port>.
func checkTFJob(t *testing.T, m manifest, claims, trainFlags map[string]bool) []*podCheck {
	t.Helper()
	specs, _ := get(m.obj, "spec", "tfReplicaSpecs").(map[string]any)
	if specs["PS"] == nil || specs["Worker"] == nil {
		t.Errorf("%s: tfReplicaSpecs has %v, want PS and Worker", m, slices.Sorted(func(yield func(string) bool) {
			for k := range specs {
				yield(k)
			}
		}))
		return nil
	}
	const ns = "team-a"
	clusterHosts := map[string][]string{}
	var pods []*podCheck
	types := map[string]*podCheck{}
	for _, rt := range []string{"PS", "Worker"} {
		rs := specs[rt]
		where := fmt.Sprintf("%s replica %s", m, rt)
		n, ok := intOf(get(rs, "replicas"))
		if !ok || n < 1 {
			t.Errorf("%s: replicas %v, want at least 1", where, get(rs, "replicas"))
			continue
		}
		if rp := str(get(rs, "restartPolicy")); !slices.Contains([]string{"Always", "OnFailure", "ExitCode", "Never"}, rp) {
			t.Errorf("%s: restartPolicy %q, want Always, OnFailure, ExitCode or Never", where, rp)
		}
		pc := checkPod(t, where, get(rs, "template"), claims, trainFlags)
		pods = append(pods, pc)
		if pc.train == nil {
			continue
		}
		if str(pc.train["name"]) != "tensorflow" {
			t.Errorf("%s: container %q runs train; the operator sets TF_CONFIG and the port for the one named tensorflow", where, pc.train["name"])
		}
		port := containerPort(t, where, pc.train, "tfjob-port")
		typ := strings.ToLower(rt)
		for i := range n {
			clusterHosts[typ] = append(clusterHosts[typ], fmt.Sprintf("%s-%s-%d.%s.svc:%d", m.name(), typ, i, ns, port))
		}
		types[typ] = pc
	}
	for typ, pc := range types {
		for i := range clusterHosts[typ] {
			tf, _ := json.Marshal(map[string]any{
				"cluster": clusterHosts, "task": map[string]any{"type": typ, "index": i}, "environment": "cloud"})
			c, err := resolveArgs(t, pc.args, nil, string(tf))
			if err != nil {
				t.Errorf("%s task %d: TF_CONFIG %s: %v", pc.where, i, tf, err)
				continue
			}
			want := cluster.Config{Spec: cluster.Spec{PS: clusterHosts["ps"], Workers: clusterHosts["worker"]}, Task: cluster.Task{Job: typ, Index: i}}
			if !slices.Equal(c.Spec.PS, want.Spec.PS) || !slices.Equal(c.Spec.Workers, want.Spec.Workers) || c.Task != want.Task || len(c.Warnings) > 0 {
				t.Errorf("%s task %d: TF_CONFIG %s resolves to %+v, want %+v", pc.where, i, tf, c, want)
			}
			if c.IsChief() != (typ == "worker" && i == 0) {
				t.Errorf("%s task %d: chief %v", pc.where, i, c.IsChief())
			}
			checkTaskCerts(t, pc, c)
		}
	}
	return pods
}

// checkPlain checks a headless Service and the Jobs and StatefulSets in its
// file: selectors, DNS names, and the cluster each pod resolves from its
// args and its index.
func checkPlain(t *testing.T, svc manifest, ms []manifest, claims, trainFlags map[string]bool) []*podCheck {
	t.Helper()
	if ip := get(svc.obj, "spec", "clusterIP"); ip != "None" {
		t.Errorf("%s: clusterIP %v, want None (headless: one DNS name per pod)", svc, ip)
	}
	if get(svc.obj, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("%s: want publishNotReadyAddresses: true, so peers resolve before they are Ready", svc)
	}
	sel, _ := get(svc.obj, "spec", "selector").(map[string]any)
	if len(sel) == 0 {
		t.Errorf("%s: no selector", svc)
	}
	svcPorts := map[int]bool{}
	for _, p := range list(get(svc.obj, "spec", "ports")) {
		if n, ok := intOf(get(p, "port")); ok {
			svcPorts[n] = true
		}
	}
	var pods []*podCheck
	type task struct {
		where string
		cfg   cluster.Config
		self  string // the pod's own DNS name:port
	}
	var tasks []task
	size := map[string]int{}
	for _, m := range ms {
		if m.file != svc.file || (m.kind() != "Job" && m.kind() != "StatefulSet") {
			continue
		}
		pc := checkPod(t, m.String(), get(m.obj, "spec", "template"), claims, trainFlags)
		pods = append(pods, pc)
		for k, v := range sel {
			if pc.labels[k] != v {
				t.Errorf("%s: pod label %s=%v, but %s selects %s=%v", m, k, pc.labels[k], svc, k, v)
			}
		}
		if pc.train == nil {
			continue
		}
		port := containerPort(t, m.String(), pc.train, "")
		if !svcPorts[port] {
			t.Errorf("%s: the container listens on %d, which %s does not expose (%v)", m, port, svc, svcPorts)
		}
		var n int
		var env func(i int) map[string]string
		var domain string
		switch m.kind() {
		case "Job":
			if get(m.obj, "spec", "completionMode") != "Indexed" {
				t.Errorf("%s: completionMode %v, want Indexed", m, get(m.obj, "spec", "completionMode"))
			}
			n, _ = intOf(get(m.obj, "spec", "completions"))
			if p, _ := intOf(get(m.obj, "spec", "parallelism")); p != n || n < 1 {
				t.Errorf("%s: completions %d, parallelism %d: want equal and at least 1, every task running at once", m, n, p)
			}
			if rp := str(pc.spec["restartPolicy"]); rp != "Never" && rp != "OnFailure" {
				t.Errorf("%s: restartPolicy %q, want Never or OnFailure", m, rp)
			}
			domain = str(pc.spec["subdomain"])
			env = func(i int) map[string]string { return map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(i)} }
		case "StatefulSet":
			n, _ = intOf(get(m.obj, "spec", "replicas"))
			domain = str(get(m.obj, "spec", "serviceName"))
			env = func(i int) map[string]string { return map[string]string{"HOSTNAME": fmt.Sprintf("%s-%d", m.name(), i)} }
		}
		if domain != svc.name() {
			t.Errorf("%s: pods' subdomain (serviceName) %q, want the headless Service %q", m, domain, svc.name())
		}
		for i := range n {
			c, err := resolveArgs(t, pc.args, env(i), "")
			if err != nil {
				t.Errorf("%s pod %d (env %v): %v", m, i, env(i), err)
				continue
			}
			tasks = append(tasks, task{fmt.Sprintf("%s pod %d", m, i), c, fmt.Sprintf("%s-%d.%s:%d", m.name(), i, domain, port)})
			size[c.Task.Job]++
			checkTaskCerts(t, pc, c)
		}
	}
	if len(tasks) == 0 {
		t.Errorf("%s: no Job or StatefulSet in %s runs train", svc, svc.file)
		return pods
	}
	first := tasks[0].cfg.Spec
	seen := map[cluster.Task]string{}
	for _, tk := range tasks {
		c := tk.cfg
		if !slices.Equal(c.Spec.PS, first.PS) || !slices.Equal(c.Spec.Workers, first.Workers) {
			t.Errorf("%s sees cluster %+v, %s sees %+v: want one cluster", tasks[0].where, first, tk.where, c.Spec)
		}
		if c.Addr() != tk.self {
			t.Errorf("%s is %v at %q, but the pod's own DNS name is %q", tk.where, c.Task, c.Addr(), tk.self)
		}
		if prev, dup := seen[c.Task]; dup {
			t.Errorf("%s and %s are both %v", prev, tk.where, c.Task)
		}
		seen[c.Task] = tk.where
		if len(c.Warnings) > 0 {
			t.Errorf("%s: warnings %q", tk.where, c.Warnings)
		}
	}
	if size["ps"] != len(first.PS) || size["worker"] != len(first.Workers) {
		t.Errorf("%s: %d ps and %d worker pods, but the hosts list %d ps and %d workers", svc.file, size["ps"], size["worker"], len(first.PS), len(first.Workers))
	}
	return pods
}

var certsFor = map[string]string{} // cluster -> directory made by paramserv certs, while its test runs

// checkTaskCerts checks that a pod with --tls_dir finds its own certificate
// in what `paramserv certs` makes for the cluster it resolves, naming the
// host its peers dial.
func checkTaskCerts(t *testing.T, pc *podCheck, c cluster.Config) {
	t.Helper()
	if pc.tlsDir == "" {
		return
	}
	key := strings.Join(c.Spec.PS, ",") + " " + strings.Join(c.Spec.Workers, ",")
	dir, ok := certsFor[key]
	if !ok {
		dir = t.TempDir()
		if _, err := secure.MakeCerts(secure.CertsConfig{PS: c.Spec.PS, Workers: c.Spec.Workers, Out: dir, Valid: time.Hour}); err != nil {
			t.Fatal(err)
		}
		certsFor[key] = dir
		t.Cleanup(func() { delete(certsFor, key) }) // the folder goes with t (go test -count=2)
	}
	host, _, _ := net.SplitHostPort(c.Addr())
	if _, err := secure.Load(secure.Files{Dir: dir}, string(c.Task.Job), c.Task.Index, host); err != nil {
		t.Errorf("%s: %s with --tls_dir: %v", pc.where, c.Task, err)
	}
}
