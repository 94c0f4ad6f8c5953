package telemetry

import (
	"testing"
	"time"

	"github.com/paramserv/paramserv/internal/lifecycle"
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
	s := lifecycle.StepStats{GlobalStep: 1, LocalStep: 1, Loss: 0.5, Examples: 100, Compute: time.Millisecond, Exchange: time.Millisecond}
	for b.Loop() {
		s.GlobalStep++
		w.Step(s)
	}
}

// BenchmarkOwnLoopStep is what the metrics add to one push+pull of a
// program's own loop and its reported loss (session's two time.Now calls
// aside).
func BenchmarkOwnLoopStep(b *testing.B) {
	reg := NewRegistry()
	c := NewCalls(reg, NewWorker(reg))
	var step int64
	for b.Loop() {
		step++
		c.Loss(0.5, 100)
		c.Call("push_pull", Bytes{PushDense: 16 << 20, PullDense: 16 << 20}, time.Millisecond, nil)
		c.Stepped(0, step, step, time.Millisecond, time.Millisecond, false)
	}
}
