package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/testutil"
)

// chromium returns the path of Debian's headless-capable chromium. It is
// missing: a skip, except under CI (CI=true), where .ci/run installs it
// and its absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium missing under CI (.ci/run installs Debian's chromium)")
	}
	t.Skip("chromium not found: apt-get install -y --no-install-recommends chromium to test the status page in a browser")
	return ""
}

// artifactDir is where a test leaves files for people to look at:
// $PARAMSERV_TEST_ARTIFACTS/<test name> if set, else a temporary dir.
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("PARAMSERV_TEST_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browse loads url in headless chromium, writes a 1200x900 screenshot to
// png and returns the DOM after loading.
func browse(t *testing.T, browser, url, shot string) string {
	t.Helper()
	// A deadline that fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--window-size=1200,900", "--screenshot="+shot, "--dump-dom", url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("chromium on %s still running after 2m; its stderr:\n%s", url, stderr.String())
	}
	if err != nil {
		t.Fatalf("chromium on %s: %v; its stderr:\n%s", url, err, stderr.String())
	}
	return stdout.String()
}

// checkScreenshot decodes a screenshot and returns how many of its pixels
// are not near-white and how many are the loss curve's red (#d62728).
func checkScreenshot(t *testing.T, path string) (inked, red int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 900 {
		t.Errorf("screenshot %s is %dx%d, want 1200x900", path, b.Dx(), b.Dy())
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			if r < 230 || g < 230 || bl < 230 {
				inked++
			}
			if r > 170 && g < 90 && bl < 90 {
				red++
			}
		}
	}
	return inked, red
}

// TestStatusPageInChromium renders the status pages of a live job in
// headless Chromium: the ps's (its step, variables and workers) and the
// worker's (its step and the loss curve as SVG). The screenshots are kept
// in the test's artefact dir.
func TestStatusPageInChromium(t *testing.T) {
	testutil.Full(t, "drives a headless Chromium; TestMetricsOfLiveCluster reads the same server's pages")
	browser := chromium(t)
	out := artifactDir(t)
	hosts := freeHosts(t, 2)
	ps, workers := hosts[:1], hosts[1:]
	on := "--metrics_addr=127.0.0.1:0"
	p0 := start(t, "ps0", nil, append(clusterArgs(ps, workers, "ps", 0), on)...)
	w0 := start(t, "worker0", nil, append(clusterArgs(ps, workers, "worker", 0), on, "--train_steps=1000000000")...)
	psURL, wURL := metricsURL(t, p0), metricsURL(t, w0)
	// Enough steps for a curve.
	deadline := time.Now().Add(time.Minute)
	for {
		if n, _ := scrape(t, wURL).Value("paramserv_worker_steps_total"); n >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker's paramserv_worker_steps_total never reached 50")
		}
		time.Sleep(20 * time.Millisecond)
	}

	psShot := filepath.Join(out, "ps0.png")
	dom := browse(t, browser, strings.TrimSuffix(psURL, "metrics"), psShot)
	for _, re := range []string{
		`<title>paramserv ps 0</title>`,
		`ps 0 at 127\.0\.0\.1:\d+: global step [1-9]\d*, async`,
		`variables: 2, 8 B: (weight|bias) \(1 values\), (weight|bias) \(1 values\)`,
		`workers \(0 of 1 done\): 0: last heard [0-9.]+m?s ago`,
	} {
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the ps's page in chromium lacks %s:\n%s", re, dom)
		}
	}
	if inked, _ := checkScreenshot(t, psShot); inked < 2000 {
		t.Errorf("the ps's screenshot %s is nearly blank: %d pixels not white", psShot, inked)
	}
	t.Logf("screenshot of the ps's status page: %s", psShot)

	wShot := filepath.Join(out, "worker0.png")
	dom = browse(t, browser, strings.TrimSuffix(wURL, "metrics"), wShot)
	for _, re := range []string{
		`<title>paramserv worker</title>`,
		`worker 0: global step [1-9]\d*, [1-9]\d* local steps, loss [0-9.e+-]+`,
		`<svg id="loss"[^>]*>\s*<polyline [^>]*points="[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)+"`,
	} {
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the worker's page in chromium lacks %s:\n%s", re, dom)
		}
	}
	inked, red := checkScreenshot(t, wShot)
	if inked < 2000 {
		t.Errorf("the worker's screenshot %s is nearly blank: %d pixels not white", wShot, inked)
	}
	// The curve drawn: a 2-pixel red line across the 640-pixel plot.
	if red < 500 {
		t.Errorf("the worker's screenshot %s shows %d red pixels, want the loss curve's (500 or more)", wShot, red)
	}
	t.Logf("screenshot of the worker's status page: %s", wShot)

	for _, p := range []*proc{w0, p0} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t, time.Minute)
	}
}
