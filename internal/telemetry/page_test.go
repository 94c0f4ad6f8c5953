package telemetry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/paramserv/paramserv/internal/lifecycle"
	"github.com/paramserv/paramserv/internal/wire/pb"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestWorkerPage(t *testing.T) {
	w := NewWorker(NewRegistry())
	p := w.Page()
	if _, body := get(t, p, "/"); !strings.Contains(body, "no step yet") || strings.Contains(body, "<polyline") {
		t.Errorf("page before any step:\n%s", body)
	}
	for s := int64(1); s <= 2000; s++ {
		w.Step(lifecycle.StepStats{Worker: 1, GlobalStep: 2 * s, LocalStep: s, Loss: 1 / float64(s), Dropped: s%100 == 0})
	}
	code, body := get(t, p, "/")
	if code != 200 || !strings.Contains(body, "worker 1: global step 4000, 2000 local steps, loss 0.0005") || !strings.Contains(body, "20 of its pushes dropped") {
		t.Errorf("page after 2000 steps (%d):\n%s", code, body)
	}
	m := regexp.MustCompile(`points="([^"]*)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no loss curve:\n%s", body)
	}
	// Thinned to at most curveMax points, spanning the steps.
	n := len(strings.Fields(m[1]))
	if n < curveMax/2 || n > curveMax {
		t.Errorf("curve of %d points, want %d to %d", n, curveMax/2, curveMax)
	}
	if !strings.Contains(body, "step 4000") {
		t.Errorf("curve does not end at step 4000:\n%s", body)
	}
	if code, _ := get(t, p, "/nope"); code != 404 {
		t.Errorf("/nope: %d, want 404", code)
	}
}

func TestPSPage(t *testing.T) {
	ps := NewPS(NewRegistry())
	p := ps.Page(1, "127.0.0.1:2222")
	if _, body := get(t, p, "/"); !strings.Contains(body, "not serving yet") {
		t.Errorf("page before Watch:\n%s", body)
	}
	ps.Watch(func() PSState {
		return PSState{Status: &pb.StatusResponse{
			Initialized: true, GlobalStep: 77, Mode: "sync", NumWorkers: 2, WorkersDone: 1, RestoredStep: -1,
			Vars: []*pb.VarStatus{{Name: "hid_w", Elements: 78400}},
			Tables: []*pb.TableStatus{{Name: "emb", Rows: 10, Bytes: 2048},
				{Name: "ids", Rows: 1000, Bytes: 4096, DiskRows: 900, DiskLookups: 400, DiskHits: 100}},
			Workers: []*pb.WorkerActivity{{Worker: 0, LastSeenMsAgo: 1500, Done: true}, {Worker: 1, LastSeenMsAgo: -1}},
		}}
	})
	_, body := get(t, p, "/")
	for _, want := range []string{
		"ps 1 at 127.0.0.1:2222: global step 77, sync",
		"variables: 1, 306.2 KiB: hid_w (78400 values)",
		"table emb: 10 rows, 2.0 KiB",
		"table ids: 1000 rows (900 on disk; 400 looked for there, hit rate 0.250), 4.0 KiB",
		"workers (1 of 2 done): 0: last heard 1.5s ago (done); 1: never heard from",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("ps page lacks %q:\n%s", want, body)
		}
	}
}
