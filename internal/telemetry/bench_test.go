package telemetry

import (
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/trainer"
)

// BenchmarkPSPushPull is what the metrics add to one push+pull on a ps:
// the Pushed and Pulled hooks (the server's two time.Now calls aside).
func BenchmarkPSPushPull(b *testing.B) {
	ps := NewPS(NewRegistry())
	for b.Loop() {
		ps.Pushed("apply", 16<<20, 0, 3*time.Millisecond)
		ps.Pulled(16<<20, 0, 5*time.Millisecond)
	}
}

// BenchmarkWorkerStep is what the metrics add to one step of a worker.
func BenchmarkWorkerStep(b *testing.B) {
	w := NewWorker(NewRegistry())
	s := trainer.StepStats{GlobalStep: 1, LocalStep: 1, Loss: 0.5, Examples: 100, Compute: time.Millisecond, Exchange: time.Millisecond}
	for b.Loop() {
		s.GlobalStep++
		w.Step(s)
	}
}
